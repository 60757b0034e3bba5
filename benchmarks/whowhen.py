"""Who&When: who and when failed, scored on the real dataset (184 failed multi-agent runs).

    python benchmarks/whowhen.py                        # offline: floors + smoke test
    python benchmarks/whowhen.py --base-url http://localhost:8000/v1 --model qwen2.5-7b \\
        [--limit 20] [--budget 300] [--subset Algorithm-Generated]

Every run is imported with ``agent_replay.ingest.load`` (step i is ``history[i]``). Predictions
are scored at agent and step level with the official rule (the label is a substring of the
prediction, so step "1" matches "12") and with exact match, plus step tolerance +-1 / +-3.

Offline it scores the trivial floors (always step 1; the first WebSurfer step; the most
frequent non-terminal speaker) and runs a *smoke test* of the counterfactual path: each run
through ``replayable_agent`` + ``attribute`` with a scripted surrogate policy (it re-says the
recorded message, or - with probability 0.3 - states the correct answer). That checks the
machinery end to end and measures its cost; its accuracy says nothing about real agents.

With ``--base-url`` (any OpenAI-compatible endpoint) the surrogate is a model asked to speak
as the agent given the conversation so far (``OpenAIChatPolicy``); the agent's system prompt
from the file is its instruction. Tool and human turns have no policy (observation-only).
A run succeeds when the final message contains the ground-truth answer.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from agent_replay import PolicyError, attribute, replayable_agent
from agent_replay.ingest import load
from agent_replay.model import StepKind, Trajectory
from agent_replay.replay.policies import OpenAIChatPolicy, ResampleRequest, ScriptedPolicy

DATASET = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "who_and_when"


def dataset_dir(explicit: Path | None) -> Path:
    if explicit is not None:
        return explicit
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "shared" / "datasets" / "who_and_when"
        if candidate.is_dir():
            return candidate
    return DATASET


def load_runs(root: Path, subset: str | None) -> list[Trajectory]:
    runs = []
    for folder in ("Algorithm-Generated", "Hand-Crafted"):
        if subset and folder != subset:
            continue
        for path in sorted((root / folder).glob("*.json"), key=lambda p: int(p.stem)):
            runs.extend(load(path, format="whowhen"))
    return runs


# -- scoring ---------------------------------------------------------------------------------


def _norm(name: Any) -> str:
    return re.sub(r"[^a-z0-9]", "", str(name).lower())


def score(predictions: list[tuple[Any, Any]], runs: list[Trajectory]) -> dict[str, float]:
    """Accuracy of ``(agent, step)`` predictions, official and exact, with step tolerance."""
    totals: Counter[str] = Counter()
    for (agent, step), run in zip(predictions, runs, strict=True):
        label = run.metadata["whowhen"]
        label_agent, label_step = label["mistake_agent"], int(label["mistake_step"])
        totals["agent official"] += agent is not None and _norm(label_agent) in _norm(agent)
        totals["agent exact"] += agent is not None and _norm(label_agent) == _norm(agent)
        totals["step official"] += step is not None and str(label_step) in str(step)
        totals["step exact"] += step is not None and int(step) == label_step
        totals["step +-1"] += step is not None and abs(int(step) - label_step) <= 1
        totals["step +-3"] += step is not None and abs(int(step) - label_step) <= 3
    n = max(1, len(runs))
    return {
        key: totals[key] / n
        for key in (
            "agent official",
            "agent exact",
            "step official",
            "step exact",
            "step +-1",
            "step +-3",
        )
    }


def floors(runs: list[Trajectory]) -> dict[str, list[tuple[Any, Any]]]:
    def first_websurfer(run: Trajectory) -> tuple[Any, Any]:
        for step in run.steps:
            if _norm(step.agent) == "websurfer":
                return step.agent, step.index
        return None, None

    def frequent_speaker(run: Trajectory) -> tuple[Any, Any]:
        speakers = Counter(
            s.agent for s in run.steps if s.kind is StepKind.LLM and s.agent is not None
        )
        if not speakers:
            return None, None
        agent = speakers.most_common(1)[0][0]
        return agent, next(s.index for s in run.steps if s.agent == agent)

    return {
        "always step 1": [(run.steps[1].agent if len(run.steps) > 1 else None, 1) for run in runs],
        "first WebSurfer step": [first_websurfer(run) for run in runs],
        "most frequent speaker": [frequent_speaker(run) for run in runs],
    }


# -- the counterfactual path -----------------------------------------------------------------


def final_text(result: Any) -> str:
    outputs = result.get("outputs", []) if isinstance(result, dict) else []
    for output in reversed(outputs):
        if isinstance(output, list) and output and isinstance(output[0], dict):
            parts = output[0].get("parts") or []
            text = " ".join(str(p.get("content", "")) for p in parts if isinstance(p, dict))
            if text.strip():
                return text
    return ""


def answer_verifier(ground_truth: str):
    target = _norm(ground_truth)

    def verifier(result: Any) -> float:
        return 1.0 if target and target in _norm(final_text(result)) else 0.0

    return verifier


def scripted_surrogate(ground_truth: str) -> ScriptedPolicy:
    def speak(request: ResampleRequest) -> Any:
        if request.rng.random() < 0.3:
            return [
                {
                    "role": "assistant",
                    "parts": [{"type": "text", "content": f"The answer is {ground_truth}."}],
                }
            ]
        return request.step.output

    return ScriptedPolicy(speak)


def model_surrogate(base_url: str, model: str, api_key: str | None) -> OpenAIChatPolicy:
    def instructions(step) -> str:
        # (the policy sends the agent's own system prompt and the task after this)
        return (
            f"You are {step.agent} in a multi-agent conversation. Reply with your next "
            "message only."
        )

    return OpenAIChatPolicy(
        base_url=base_url,
        model=model,
        api_key=api_key,
        instructions=instructions,
        temperature=1.0,
        max_tokens=512,
    )


def counterfactual(
    runs: list[Trajectory], policy_for, budget: float, label: str
) -> tuple[list[tuple[Any, Any]], dict[str, float]]:
    predictions, costs, decided, errors = [], [], 0, 0
    started = time.perf_counter()
    for i, run in enumerate(runs, 1):
        truth = str(run.metadata["whowhen"].get("ground_truth") or "")
        agent = replayable_agent(run, {"llm": policy_for(truth)})
        verifier = answer_verifier(truth)
        try:
            result = attribute(run, agent, verifier, budget=budget, rollouts=64)
        except PolicyError as exc:  # the endpoint failed: no table is a result then
            sys.exit(f"{run.session_id}: the resample policy failed, stopping: {exc}")
        except Exception as exc:  # a run the surrogate cannot make fail
            print(f"  {run.session_id}: {type(exc).__name__}: {exc}", file=sys.stderr)
            predictions.append((None, None))
            errors += 1
            continue
        decided += result.culprit_index is not None
        predictions.append((result.culprit_agent, result.culprit_index))
        costs.append(result.cost["live_steps"])
        print(f"\r  {label}: {i}/{len(runs)}", end="", file=sys.stderr)
    print(file=sys.stderr)
    stats = {
        "decided": decided / max(1, len(runs)),
        "undecided": len(runs) - decided - errors,  # attributed, no culprit named
        "errors": errors,
        "live steps per run": statistics.mean(costs) if costs else 0.0,
        "seconds": time.perf_counter() - started,
    }
    return predictions, stats


def table(rows: dict[str, dict[str, float]]) -> None:
    keys = ["agent official", "agent exact", "step official", "step exact", "step +-1", "step +-3"]
    print(f"{'':<40}" + "".join(f"{k:>15}" for k in keys))
    for name, values in rows.items():
        print(f"{name:<40}" + "".join(f"{values[k]:>15.1%}" for k in keys))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=None)
    parser.add_argument("--subset", choices=("Algorithm-Generated", "Hand-Crafted"), default=None)
    parser.add_argument("--limit", type=int, default=None, help="runs for the counterfactual path")
    parser.add_argument("--budget", type=float, default=200, help="live steps per run")
    parser.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint")
    parser.add_argument("--model", default=None)
    parser.add_argument("--api-key", default=None)
    args = parser.parse_args()
    if args.base_url and not args.model:  # before the import and the floors, not after
        parser.error("--model is required with --base-url")

    root = dataset_dir(args.dataset)
    started = time.perf_counter()
    runs = load_runs(root, args.subset)
    if not runs:
        sys.exit(f"no Who&When runs found in {root} (pass --dataset DIR)")
    print(f"imported {len(runs)} runs from {root} in {time.perf_counter() - started:.1f}s")
    for subset in ("Algorithm-Generated", "Hand-Crafted"):
        mine = [r for r in runs if r.metadata["whowhen"]["subset"] == subset]
        if not mine:
            continue
        print(f"\n{subset} ({len(mine)} runs), trivial floors:")
        table({name: score(preds, mine) for name, preds in floors(mine).items()})

    sample = runs[: args.limit] if args.limit else runs[:20]
    if args.base_url:
        policy = model_surrogate(args.base_url, args.model, args.api_key)
        predictions, stats = counterfactual(
            sample, lambda truth: policy, args.budget, "model surrogate"
        )
        title = f"counterfactual attribution, {args.model} as surrogate"
    else:
        predictions, stats = counterfactual(sample, scripted_surrogate, args.budget, "smoke test")
        title = "smoke test (scripted surrogate, not a model)"
    print(f"\n{title}: {len(sample)} runs, budget {args.budget:.0f} live steps each")
    if stats["errors"] == len(sample):
        sys.exit("no run could be attributed (see the errors above): no table")
    # an undecided run (no culprit named) is a miss in the table, as a failed one is
    table({"counterfactual" if args.base_url else "smoke test": score(predictions, sample)})
    print(
        f"decided {stats['decided']:.0%} ({stats['undecided']} undecided, "
        f"{stats['errors']} failed, counted as misses), "
        f"{stats['live steps per run']:.0f} live steps per run, {stats['seconds']:.1f}s"
    )


if __name__ == "__main__":
    main()
