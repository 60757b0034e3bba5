"""Attribution: step effects, Shapley values, repair, and the analyses built on them."""

from .aggregate import AggregateResult, aggregate_runs
from .analyze import analyze
from .api import attribute
from .drift import DriftResult, drift
from .faithfulness import FaithfulnessResult, faithfulness
from .repair import export_contrastive_pairs, find_minimal_repair
from .result import AttributionResult, CurvePoint, Fidelity, Repair, ShapleyResult, StepEffect
from .stats import Interval

__all__ = [
    "AggregateResult",
    "AttributionResult",
    "CurvePoint",
    "DriftResult",
    "FaithfulnessResult",
    "Fidelity",
    "Interval",
    "Repair",
    "ShapleyResult",
    "StepEffect",
    "aggregate_runs",
    "analyze",
    "attribute",
    "drift",
    "export_contrastive_pairs",
    "faithfulness",
    "find_minimal_repair",
]
