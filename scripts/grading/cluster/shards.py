"""Split an export into shards of about equal grading time, the same way every time (staff only).

A submission's cost is what its grade can take: the time budgets (rubric ``budget_s``) of the parts it is graded
on, i.e. the parts the grader args select (``--parts``, default all) whose module the submission holds. A part
whose module is missing grades as the untouched stub, in seconds, so it costs only ``STARTUP_S``. Shards are
filled longest first, each submission into the lightest shard so far (ties: the lower shard), with submissions
of equal cost taken in name order: the same export and arguments give the same shards on every machine.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from scripts.grading.rubric import RUBRIC_PATH, load_rubric
from scripts.grading.sandbox import SubmissionError, read_submission

STARTUP_S = 10.0  # a grade's fixed cost (the grader, pytest, the ranks' torch import), whatever it holds


def export_submissions(export: Path) -> list[Path]:
    """What ``--batch EXPORT`` grades: every zip and every folder in it, by name."""
    return sorted(p for p in export.iterdir() if p.is_dir() or p.suffix == ".zip")


def grader_option(grader_args: list[str], flag: str) -> str | None:
    """The value the grader will read for ``flag`` (``--parts``, ``--rubric``), or None when it is not given."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(flag)
    return getattr(p.parse_known_args(grader_args)[0], flag.lstrip("-").replace("-", "_"))


def part_budgets(grader_args: list[str]) -> dict[str, float]:
    """{part module: its budget in seconds} for the parts the grader args select."""
    rubric = load_rubric(Path(grader_option(grader_args, "--rubric") or RUBRIC_PATH))
    parts = grader_option(grader_args, "--parts")
    return {name: part.budget_s for name, part in rubric.select(parts.split(",") if parts else None).parts.items()}


def cost(submission: Path, budgets: dict[str, float]) -> float:
    """Seconds a grade of ``submission`` may take at most: the budgets of the selected parts it holds."""
    try:
        modules = read_submission(submission).modules
    except SubmissionError:
        modules = {}  # unreadable: graded to 0 at once, like a stub
    return STARTUP_S + sum(budget for part, budget in budgets.items() if part in modules)


def plan_shards(costs: dict[str, float], shards: int) -> list[list[str]]:
    """{submission name: cost} -> ``shards`` lists of names (none empty when there are enough names), longest
    processing time first; each list in name order. Deterministic for the same costs."""
    shards = max(1, min(shards, len(costs)))
    loads, out = [0.0] * shards, [[] for _ in range(shards)]
    for name in sorted(costs, key=lambda n: (-costs[n], n)):
        k = min(range(shards), key=lambda i: (loads[i], i))
        loads[k] += costs[name]
        out[k].append(name)
    return [sorted(names) for names in out]
