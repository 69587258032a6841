"""Build the Gradescope autograder zip: setup.sh, run_autograder and the kit, all at its root.

    python -m scripts.grading.make_autograder_zip                      # writes out/autograder.zip
    python -m scripts.grading.make_autograder_zip --parts 2,4          # a kit of parts 2 and 4 only
    python -m scripts.grading.make_autograder_zip --parts 2,4 --check  # and grade its stubs from the zip alone:
                                                                       # the grader's maximum must be its rubric's

Gradescope unpacks the zip into /autograder/source (and copies run_autograder to /autograder), so the
kit sits at the zip's root, where run_autograder expects it. The zip holds what grading needs (the
tests with the hidden ones, the harness, the stubs and given helpers, the grader and its rubric) and
nothing staff.py keeps off the grading machine: no copy of the reference exists there for a
submission to find. Upload it under "Configure Autograder" (see handouts/grading.md).

With ``--no-device-faithful`` (or ``--device-faithful``) every grade of the zip runs so: the zip holds the option in
``grade-args``, which run_autograder passes to the grader, and each results.json records it.

With ``--parts`` (scripts/grading/subset.py): only those parts' public and hidden tests, a rubric of
their entries, and the part modules as the student release has them (the stubs of the kept parts, the
reference of the modules they build on, which a submission without them is graded with).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from scripts.grading import subset
from scripts.grading.staff import reaches_grading_machine

REPO = Path(__file__).resolve().parents[2]
KEEP = ("pyproject.toml", "cs336_systems/", "tests/", "scripts/")
RUBRIC = "scripts/grading/rubric.toml"


GRADE_ARGS = "grade-args"  # at the zip's root: grader options run_autograder adds to every grade (one line of words)


def build(out: Path, parts: frozenset[int] | None = None, grade_args: list[str] | None = None) -> int:
    """Write the zip; return how many source files it holds. ``grade_args``: options every grade of the zip gets
    (``--no-device-faithful``), written as ``grade-args`` for run_autograder."""
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    replaced: dict[str, str] = {}
    if parts is not None:
        replaced = {f"cs336_systems/{m}.py": text for m, text in subset.subset_stubs(parts).items()}
        replaced[RUBRIC] = subset.subset_rubric((REPO / RUBRIC).read_text(), parts)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in ("setup.sh", "run_autograder"):
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o755 << 16
            zf.writestr(info, (REPO / "scripts/grading/gradescope" / name).read_bytes())
        if grade_args:
            zf.writestr(GRADE_ARGS, " ".join(grade_args) + "\n")
        kept = [f for f in files if f.startswith(KEEP) and reaches_grading_machine(f) and (REPO / f).is_file()
                and (parts is None or subset.keeps(f, parts))]  # fmt: skip
        for f in kept:  # Gradescope unzips into /autograder/source: the kit must be at the top
            if f in replaced:
                zf.writestr(f, replaced[f])
            else:
                zf.write(REPO / f, f)
    return len(kept)


def check(zip_path: Path, parts: frozenset[int] | None) -> list[str]:
    """Unpack the zip alone, grade its own part modules with its own grader: the maximum must be its rubric's
    (the kept parts' public and hidden points), and no reference may be importable there."""
    problems = []
    with tempfile.TemporaryDirectory(prefix="cs336-autograder-") as tmp:
        root = Path(tmp) / "source"
        with zipfile.ZipFile(zip_path) as zf:
            zf.extractall(root)
        if (root / "reference_solutions").exists():
            problems.append("the zip holds reference_solutions/")
        sub = root / "cs336_systems"
        cmd = [sys.executable, "-m", "scripts.grading", str(sub), "--out", str(Path(tmp) / "results.json"),
               "--world-sizes", "1,2", "--deadline", "20"]  # fmt: skip
        run = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=1200)
        if not (Path(tmp) / "results.json").exists():
            return problems + [f"the grader wrote no results:\n{(run.stdout + run.stderr)[-3000:]}"]
        results = json.loads((Path(tmp) / "results.json").read_text())
        code = f"import sys; sys.path.insert(0, {str(root)!r}); from scripts.grading.rubric import load_rubric; " \
               "r = load_rubric(); print(sum(p.points + p.hidden_points for p in r.parts.values()))"  # fmt: skip
        want = float(subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                                    check=True).stdout)  # fmt: skip
        got = round(sum(t["max_score"] for t in results["tests"]), 3)
        if abs(got - want) > 1e-6:
            problems.append(f"the grader's maximum is {got:g}, the zip's rubric says {want:g}")
        numbers = {int(re.match(r"P(\d+)-T\d+$", t["number"])[1]) for t in results["tests"]}
        if parts is not None and numbers != set(parts):
            problems.append(f"graded parts {sorted(numbers)}, the kit's are {sorted(parts)}")
        print(f"autograder zip: grader maximum {got:g} = rubric {want:g}; parts {sorted(numbers)}; stubs score "
              f"{results['score']:g}")  # fmt: skip
    return problems


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=REPO / "out" / "autograder.zip")
    p.add_argument("--parts", help="only these parts, e.g. 1,2,3 (see scripts/grading/subset.py)")
    p.add_argument("--check", action="store_true", help="grade the zip's stubs from the zip alone (a few minutes)")
    p.add_argument("--device-faithful", action=argparse.BooleanOptionalAction, default=None,
                   help="every grade of the zip with (or, --no-device-faithful, without) device-faithful mode "
                   "(default: the grader's, on with gloo); recorded in each results.json")  # fmt: skip
    args = p.parse_args()
    parts = subset.parse_parts(args.parts)
    grade_args = [] if args.device_faithful is None else [f"--{'' if args.device_faithful else 'no-'}device-faithful"]
    n = build(args.out, parts, grade_args)
    print(f"wrote {args.out} ({n} source files" + (f", parts {args.parts})" if parts else ")")
          + (f"; every grade with {' '.join(grade_args)}" if grade_args else ""))  # fmt: skip
    if not args.check:
        return 0
    problems = check(args.out, parts)
    for problem in problems:
        print("PROBLEM:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
