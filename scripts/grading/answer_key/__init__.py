"""The answer key for the written problems (staff only): one source file per part, generated into markdown.

    python -m scripts.grading.answer_key            # write handouts/answer-key/*.md (key per part + Gradescope outline)
    python -m scripts.grading.answer_key --check    # CI: fail when a [[written]] entry has no key, or a file is stale

Each ``partNN.py`` here defines ``SECTIONS``: one ``Section`` per ``[[written]]`` entry of the rubric
(scripts/grading/rubric.toml) of that part, each a list of ``Problem``s. Numbers in an answer are computed
in the part file by calling ``reference_solutions.accounting`` (or another reference module), so the key
cannot drift from the code. How to add an entry: README.md in this folder.

Staff only, and kept off the grading machine (scripts/grading/staff.py): a submission runs there and could
print it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Problem:
    """One written problem (or one write-up item) with its worked answer and how to grade it."""

    number: str  # the handout's item number inside the section ("1", "2", ...); "" for a section with none
    title: str  # short, as the handout's bold lead-in ("Tree vs ring")
    points: float  # this problem's share of the section's [[written]] points (halves are fine)
    answer: str  # the worked answer, markdown; numbers computed in the part file (f-strings)
    rubric: tuple = ()  # ((points, "what earns them"), ...): adds up to ``points``
    wrong: tuple = ()  # common wrong answers, each with what it earns ("0: ...", "-0.5: ...")
    expect: tuple = ()  # write-ups: the reference's figures on the course VM, ranges, signs of a wrong implementation
    # The inputs the answer's numbers are computed from, each as the handout's question writes it ("p = 16",
    # "50 GB/s"): --check fails unless each appears in the question's text. Required when the answer states a
    # computed number in bold; () for a question answered from the student's own measurements or symbols.
    given: tuple | None = None


@dataclass(frozen=True)
class Section:
    """The key of one ``[[written]]`` entry: its part and heading exactly as in the rubric."""

    part: int
    heading: str
    problems: tuple = field(default_factory=tuple)

    @property
    def points(self) -> float:
        return sum(p.points for p in self.problems)


def num(x: float, digits: int = 3) -> str:
    """A number with ``digits`` significant digits, without scientific notation for everyday sizes."""
    if x == 0:
        return "0"
    if 1e-3 <= abs(x) < 1e7:
        return f"{x:.{digits}g}" if abs(x) < 10**digits else f"{x:,.0f}"
    return f"{x:.{digits - 1}e}"


def nbytes(x: float) -> str:
    """Bytes in the largest binary unit that keeps the number >= 1 ("94.1 KiB (96,376 B)" style, short)."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(x) >= size:
            return f"{num(x / size)} {unit}"
    return f"{num(x)} B"


def seconds(x: float) -> str:
    for unit, size in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(x) >= size:
            return f"{num(x / size)} {unit}"
    return f"{num(x / 1e-9)} ns"
