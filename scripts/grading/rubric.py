"""The rubric (scripts/grading/rubric.toml) and the scoring of collected test cases against it.

    rubric = load_rubric()                       # validated; errors name the key
    entries = score(rubric, items, outcomes)     # one Entry per test function, Gradescope-ready

``items`` are what pytest collected (nodeid, file, function, markers, first docstring line) and
``outcomes`` what happened to each nodeid (passed / failed / skipped / not run, with text). A test
function's parametrized cases form one entry; its points come from its part's pool and weight.
"""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 (Gradescope's older images): setup.sh installs tomli
    import tomli as tomllib

RUBRIC_PATH = Path(__file__).resolve().with_name("rubric.toml")
VISIBILITIES = {"visible", "hidden", "after_due_date", "after_published"}


DEFAULT_BUDGET_S = 300.0  # a part's time budget when the rubric gives none
DEFAULT_TIMEOUT_S = 2400.0  # the grader's --timeout (a whole grade): the parts' budgets must sum to less


class RubricError(ValueError):
    """The rubric file is malformed; the message names the key."""


@dataclass(frozen=True)
class Part:
    name: str
    number: int
    points: float
    hidden_points: float
    files: tuple[str, ...]
    hidden_files: tuple[str, ...]
    weights: dict = field(default_factory=dict, hash=False)
    visibility: dict = field(default_factory=dict, hash=False)
    tasks: dict = field(default_factory=dict, hash=False)  # "1.5" -> public points, spread over its tests
    budget_s: float = DEFAULT_BUDGET_S  # the most a grade spends running its tests, public and hidden together

    def pool_of(self, path: str) -> str | None:
        """'public', 'hidden' or None: which of this part's point pools a test file belongs to."""
        if any(fnmatch.fnmatch(path, p) for p in self.hidden_files):
            return "hidden"
        if any(fnmatch.fnmatch(path, p) for p in self.files):
            return "public"
        return None

    def weight_of(self, function: str) -> float:
        return next((float(w) for pat, w in self.weights.items() if fnmatch.fnmatch(function, pat)), 1.0)


@dataclass(frozen=True)
class Written:
    """A written problem or write-up, graded by hand on Gradescope: its handout part, the start of its
    section heading (after the ``## ``), and its points."""

    part: int
    heading: str
    points: float


@dataclass(frozen=True)
class Rubric:
    parts: dict[str, Part]
    partial_credit: bool = True
    exclude_markers: tuple[str, ...] = ("harness", "staff")
    skipped: str = "drop"
    public_visibility: str = "visible"
    hidden_visibility: str = "after_published"
    max_output_chars: int = 4000
    written: tuple = ()  # Written(part, heading, points): graded by hand, not in the autograder's maximum

    def part_of(self, path: str) -> tuple[Part, str] | None:
        for part in self.parts.values():
            pool = part.pool_of(path)
            if pool:
                return part, pool
        return None

    def select(self, names: list[str] | None) -> Rubric:
        """Only the named entries (by name, or by handout part number: ``3`` is sharded_optimizer and fsdp)."""
        if not names:
            return self
        chosen = {}
        for n in names:
            match = [p for p in self.parts.values() if n in (p.name, str(p.number))]
            if not match:
                raise RubricError(f"--parts: no part named {n!r} (parts: {', '.join(self.parts)})")
            chosen.update((p.name, p) for p in match)
        return Rubric(**{**self.__dict__, "parts": chosen})


def load_rubric(path: Path = RUBRIC_PATH) -> Rubric:
    with open(path, "rb") as f:
        try:
            raw = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise RubricError(f"{path}: {exc}") from exc
    grading = raw.get("grading", {})
    unknown = set(grading) - set(Rubric.__dataclass_fields__) - {"parts"}
    if unknown:
        raise RubricError(f"{path}: unknown key(s) in [grading]: {sorted(unknown)}")
    parts = {}
    for name, spec in raw.get("parts", {}).items():
        where = f"{path}: [parts.{name}]"
        for key in ("number", "points", "files"):
            if key not in spec:
                raise RubricError(f"{where} needs `{key}`")
        extra = set(spec) - {"number", "points", "hidden_points", "files", "hidden_files", "weights", "visibility",
                             "tasks", "budget_s"}  # fmt: skip
        if extra:
            raise RubricError(f"{where}: unknown key(s) {sorted(extra)}")
        for pat, vis in spec.get("visibility", {}).items():
            if vis not in VISIBILITIES:
                raise RubricError(f"{where}.visibility: {pat!r} = {vis!r} is not one of {sorted(VISIBILITIES)}")
        for pat, w in spec.get("weights", {}).items():
            if not isinstance(w, (int, float)) or w < 0:
                raise RubricError(f"{where}.weights: {pat!r} = {w!r} must be a number >= 0")
        for task, pts in spec.get("tasks", {}).items():
            if not re.fullmatch(rf"{int(spec['number'])}\.\d+", task) or not isinstance(pts, (int, float)) or pts < 0:
                raise RubricError(f'{where}.tasks: {task!r} = {pts!r}: want "{spec["number"]}.<t>" = points >= 0')
        budget = spec.get("budget_s", DEFAULT_BUDGET_S)
        if not isinstance(budget, (int, float)) or isinstance(budget, bool) or budget <= 0:
            raise RubricError(f"{where}: budget_s = {budget!r} must be a number of seconds > 0")
        parts[name] = Part(
            name=name, number=int(spec["number"]), points=float(spec["points"]),
            hidden_points=float(spec.get("hidden_points", 0)), files=tuple(spec["files"]),
            hidden_files=tuple(spec.get("hidden_files", ())), weights=dict(spec.get("weights", {})),
            visibility=dict(spec.get("visibility", {})), tasks=dict(spec.get("tasks", {})), budget_s=float(budget),
        )  # fmt: skip
    written = []
    for i, w in enumerate(raw.get("written", [])):
        if set(w) != {"part", "heading", "points"} or not isinstance(w["points"], (int, float)):
            raise RubricError(f"{path}: [[written]] #{i + 1} needs exactly part, heading and points, got {w}")
        written.append(Written(int(w["part"]), str(w["heading"]), float(w["points"])))
    settings = {k: (tuple(v) if isinstance(v, list) else v) for k, v in grading.items()}
    rubric = Rubric(parts=parts, written=tuple(written), **settings)
    for key in ("public_visibility", "hidden_visibility"):
        if getattr(rubric, key) not in VISIBILITIES:
            raise RubricError(f"{path}: [grading] {key} must be one of {sorted(VISIBILITIES)}")
    if rubric.skipped not in ("drop", "fail"):
        raise RubricError(f"{path}: [grading] skipped must be 'drop' or 'fail'")
    return rubric


# -- scoring ------------------------------------------------------------------------------------------


@dataclass
class Entry:
    """One Gradescope test: a test function with all its cases."""

    part: Part
    pool: str  # "public" or "hidden"
    file: str
    function: str
    doc: str
    cases: list[tuple[str, str, str]] = field(default_factory=list)  # (nodeid, outcome, output)
    tasks: set = field(default_factory=set)  # its part's handout tasks ("1.5") its counted cases are marked with
    max_score: float = 0.0
    score: float = 0.0

    @property
    def counted(self) -> list[tuple[str, str, str]]:
        return [c for c in self.cases if c[1] != "skipped"]

    @property
    def passed(self) -> int:
        return sum(c[1] == "passed" for c in self.cases)


def excluded(rubric: Rubric, item: dict) -> bool:
    return bool(set(item["markers"]) & set(rubric.exclude_markers))


TASK_MARKER = re.compile(r"task(\d+)_(\d+)")


def tasks_of(markers, part_number: int) -> set[str]:
    """The handout tasks of part ``part_number`` that ``markers`` name: ``task1_5`` -> ``"1.5"``. Markers
    of another part's tasks (part 7 re-runs parts 2-5 on mesh groups) are for ``-m`` only."""
    found = (TASK_MARKER.fullmatch(m) for m in markers)
    return {f"{m[1]}.{m[2]}" for m in found if m and int(m[1]) == part_number}


def _spread(part: Part, pool: str, members: list[Entry]) -> None:
    """Give each entry of ``members`` its max_score. Public tests of a part with ``tasks``: each task's
    points spread over the test functions marked with it (by weight); otherwise (hidden pools, parts
    without tasks) the pool's points spread over all its test functions by weight."""
    weight = part.weight_of
    if pool == "hidden" or not part.tasks:
        points = part.hidden_points if pool == "hidden" else part.points
        total = sum(weight(e.function) for e in members)
        for e in members:
            e.max_score = points * weight(e.function) / total if total else 0.0
        return
    for e in members:
        e.max_score = 0.0
    for task, points in part.tasks.items():
        having = [e for e in members if task in e.tasks]
        total = sum(weight(e.function) for e in having)
        for e in having:
            e.max_score += points * weight(e.function) / total if total else 0.0


CENTS = 100  # max_scores are whole hundredths of a point


def _round_to_cents(members: list[Entry]) -> None:
    """Round the members' max_scores to hundredths so that they sum exactly to the pool's points
    (largest remainder: each gets its share rounded down, then the hundredths still missing go to
    the largest remainders, ties in order). Rounding each share alone makes 24 points 23.998."""
    exact = [e.max_score * CENTS for e in members]
    floors = [math.floor(x + 1e-9) for x in exact]  # 1e-9: a share of 2.9999999997 cents is 3
    missing = round(sum(exact)) - sum(floors)
    by_remainder = sorted(range(len(members)), key=lambda i: floors[i] - exact[i])  # largest remainder first
    for i in by_remainder[: max(0, missing)]:
        floors[i] += 1
    for e, cents in zip(members, floors):
        e.max_score = cents / CENTS


def score(rubric: Rubric, items: list[dict], outcomes: dict[str, tuple[str, str]]) -> tuple[list[Entry], list[str]]:
    """Group cases into entries, spread each pool's points by weight, score. Returns (entries, warnings)."""
    entries: dict[tuple[str, str], Entry] = {}
    warnings = []
    for item in items:
        if excluded(rubric, item):
            continue
        found = rubric.part_of(item["file"])
        if found is None:
            warnings.append(f"{item['file']}: in no part of the rubric; not graded")
            continue
        part, pool = found
        key = (item["file"], item["function"])
        entry = entries.setdefault(key, Entry(part, pool, item["file"], item["function"], item.get("doc", "")))
        outcome, output = outcomes.get(item["nodeid"], ("not run", "the test was not run"))
        if outcome == "skipped" and rubric.skipped == "fail":
            outcome = "failed"
        entry.cases.append((item["nodeid"], outcome, output))
        if outcome != "skipped":
            entry.tasks |= tasks_of(item["markers"], part.number)
    order = {name: i for i, name in enumerate(rubric.parts)}  # the rubric's order (sharded_optimizer before fsdp)
    ordered = sorted(entries.values(), key=lambda e: (order[e.part.name], e.pool == "hidden", e.file))
    for part in rubric.parts.values():
        for pool in ("public", "hidden"):
            members = [e for e in ordered if e.part is part and e.pool == pool and e.counted]
            _spread(part, pool, members)
            _round_to_cents(members)
            for e in members:
                fraction = e.passed / len(e.counted)
                if not rubric.partial_credit:
                    fraction = float(fraction == 1.0)
                e.score = e.max_score * fraction
    return ordered, sorted(set(warnings))


def visibility(rubric: Rubric, entry: Entry) -> str:
    for pat, vis in entry.part.visibility.items():
        if fnmatch.fnmatch(entry.function, pat):
            return vis
    return rubric.hidden_visibility if entry.pool == "hidden" else rubric.public_visibility
