"""The rubric (scripts/grading/rubric.toml) and the scoring of collected test cases against it.

    rubric = load_rubric()                       # validated; errors name the key
    entries = score(rubric, items, outcomes)     # one Entry per test function, Gradescope-ready

``items`` are what pytest collected (nodeid, file, function, markers, first docstring line) and
``outcomes`` what happened to each nodeid (passed / failed / skipped / not run, with text). A test
function's parametrized cases form one entry; its points come from its part's pool and weight.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 (Gradescope's older images): setup.sh installs tomli
    import tomli as tomllib

RUBRIC_PATH = Path(__file__).resolve().with_name("rubric.toml")
VISIBILITIES = {"visible", "hidden", "after_due_date", "after_published"}


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
class Rubric:
    parts: dict[str, Part]
    partial_credit: bool = True
    exclude_markers: tuple[str, ...] = ("harness", "staff")
    skipped: str = "drop"
    public_visibility: str = "visible"
    hidden_visibility: str = "after_published"
    max_output_chars: int = 4000

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
        extra = set(spec) - {"number", "points", "hidden_points", "files", "hidden_files", "weights", "visibility"}
        if extra:
            raise RubricError(f"{where}: unknown key(s) {sorted(extra)}")
        for pat, vis in spec.get("visibility", {}).items():
            if vis not in VISIBILITIES:
                raise RubricError(f"{where}.visibility: {pat!r} = {vis!r} is not one of {sorted(VISIBILITIES)}")
        for pat, w in spec.get("weights", {}).items():
            if not isinstance(w, (int, float)) or w < 0:
                raise RubricError(f"{where}.weights: {pat!r} = {w!r} must be a number >= 0")
        parts[name] = Part(
            name=name, number=int(spec["number"]), points=float(spec["points"]),
            hidden_points=float(spec.get("hidden_points", 0)), files=tuple(spec["files"]),
            hidden_files=tuple(spec.get("hidden_files", ())), weights=dict(spec.get("weights", {})),
            visibility=dict(spec.get("visibility", {})),
        )  # fmt: skip
    rubric = Rubric(parts=parts, **{k: (tuple(v) if isinstance(v, list) else v) for k, v in grading.items()})
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
    order = {name: i for i, name in enumerate(rubric.parts)}  # the rubric's order (sharded_optimizer before fsdp)
    ordered = sorted(entries.values(), key=lambda e: (order[e.part.name], e.pool == "hidden", e.file))
    for part in rubric.parts.values():
        for pool, points in (("public", part.points), ("hidden", part.hidden_points)):
            members = [e for e in ordered if e.part is part and e.pool == pool and e.counted]
            total_weight = sum(part.weight_of(e.function) for e in members)
            for e in members:
                e.max_score = points * part.weight_of(e.function) / total_weight if total_weight else 0.0
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
