"""Attribution: step effects, Shapley values, repair, and the analyses built on them."""

from .api import attribute
from .repair import find_minimal_repair
from .result import AttributionResult, CurvePoint, Fidelity, Repair, ShapleyResult, StepEffect
from .stats import Interval

__all__ = [
    "AttributionResult",
    "CurvePoint",
    "Fidelity",
    "Interval",
    "Repair",
    "ShapleyResult",
    "StepEffect",
    "attribute",
    "find_minimal_repair",
]
