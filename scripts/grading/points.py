"""Points from one source: the rubric (scripts/grading/rubric.toml). Prints them, writes them into the
handouts, and checks that everything agrees.

    python -m scripts.grading.points            # the table: points per entry and per handout part
    python -m scripts.grading.points --write    # rewrite each handout's block between the markers
    python -m scripts.grading.points --check    # CI: fail on any disagreement (exit status 1)

A handout carries its part's autograded points between ``<!-- points:begin -->`` and
``<!-- points:end -->``; ``--write`` replaces that block, ``--check`` fails when it is stale.
``--check`` also fails when an entry's points are not whole numbers, when a pool with points has no
test file (its points would silently drop), when a test file of the kit is in no entry (its tests
would not be graded), or when an entry matches no public test file.
"""

from __future__ import annotations

import argparse
import glob
import re
import sys
from pathlib import Path

from scripts.grading.rubric import Rubric, load_rubric

ROOT = Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- points:begin -->", "<!-- points:end -->"
UNGRADED = {"tests/test_harness.py", "tests/test_trace.py"}  # the harness's own tests (marker `harness`)


def files_of(patterns) -> list[str]:
    return sorted({p for pat in patterns for p in glob.glob(pat, root_dir=ROOT)})


def problems(rubric: Rubric) -> list[str]:
    found = []
    for part in rubric.parts.values():
        for key in ("points", "hidden_points"):
            if getattr(part, key) != round(getattr(part, key)):
                found.append(f"[parts.{part.name}] {key} = {getattr(part, key)}: use whole points")
        if not files_of(part.files):
            found.append(f"[parts.{part.name}]: no public test file matches {list(part.files)}")
        if part.hidden_points and not files_of(part.hidden_files):
            found.append(
                f"[parts.{part.name}]: hidden_points = {part.hidden_points:g} but no hidden test file matches "
                f"{list(part.hidden_files)}; add a hidden test or set hidden_points = 0"
            )
    tests = files_of(["tests/test_*.py", "tests/staff/hidden/test_*.py"])
    for path in tests:
        if path not in UNGRADED and rubric.part_of(path) is None:
            found.append(f"{path}: in no entry of the rubric, so never graded")
    return found


def totals(rubric: Rubric) -> dict[int, tuple[float, float]]:
    """Handout part number -> (public, hidden) points."""
    out: dict[int, tuple[float, float]] = {}
    for part in rubric.parts.values():
        pub, hid = out.get(part.number, (0.0, 0.0))
        out[part.number] = (pub + part.points, hid + part.hidden_points)
    return out


def block(rubric: Rubric, number: int) -> str:
    rows = [p for p in rubric.parts.values() if p.number == number]
    lines = [
        BEGIN,
        "<!-- written by `python -m scripts.grading.points --write` from scripts/grading/rubric.toml; edit that -->",
        "",
        "| autograded | public tests | hidden tests | total |",
        "|---|---:|---:|---:|",
    ]
    for p in rows:
        lines.append(f"| `{p.name}` | {p.points:g} | {p.hidden_points:g} | {p.points + p.hidden_points:g} |")
    pub, hid = totals(rubric)[number]
    if len(rows) > 1:
        lines.append(f"| **part {number}** | {pub:g} | {hid:g} | {pub + hid:g} |")
    lines += ["", END]
    return "\n".join(lines)


def handout_of(number: int) -> Path | None:
    found = sorted((ROOT / "handouts").glob(f"{number:02d}-*.md"))
    return found[0] if found else None


def sync(rubric: Rubric, write: bool) -> list[str]:
    """Rewrite (or check) each handout's block; handouts without markers are skipped."""
    stale = []
    for number in sorted(totals(rubric)):
        path = handout_of(number)
        if path is None or BEGIN not in path.read_text():
            continue
        text, table = path.read_text(), block(rubric, number)
        new = re.sub(re.escape(BEGIN) + r".*?" + re.escape(END), lambda _, table=table: table, text, flags=re.S)
        if new != text:
            stale.append(f"{path.relative_to(ROOT)}: points block disagrees with the rubric")
            if write:
                path.write_text(new)
    return stale


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the handouts' points blocks")
    mode.add_argument("--check", action="store_true", help="fail if anything disagrees with the rubric")
    args = parser.parse_args()
    rubric = load_rubric()
    print("| part | entry | public | hidden |")
    for p in rubric.parts.values():
        print(f"| {p.number} | {p.name} | {p.points:g} | {p.hidden_points:g} |")
    grand = sum(p.points + p.hidden_points for p in rubric.parts.values())
    print(f"grader maximum: {grand:g} points")
    stale = sync(rubric, write=args.write)
    if args.write:
        print("\n".join(f"rewrote {s.split(':')[0]}" for s in stale) or "handouts already current")
        return 0
    if args.check:
        errors = problems(rubric) + stale
        for e in errors:
            print(f"FAIL: {e}", file=sys.stderr)
        return 1 if errors else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
