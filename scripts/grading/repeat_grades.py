"""Grade the staff reference again and again, alone and concurrently, and check every entry's score is identical.

    python -m scripts.grading.repeat_grades                          # 10 in a row + 2 at once, every part (~30 min)
    python -m scripts.grading.repeat_grades --times 3 --concurrent 2 --parts accounting,collectives

A grade that depends on timing (a deadline hit under load, a flaky tolerance, a port taken by the other
grade) shows up as an entry whose score differs between runs. Each grade is ``python -m scripts.grading``
on a copy of ``reference_solutions`` submitted as ``cs336_systems/``; the concurrent ones go through
``--batch --jobs N``, so N grades share the machine. Prints each run's time and total, then every
entry whose score was not the same in all runs; exits 1 if there is one (or a run is not full marks).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _submission(folder: Path) -> Path:
    """A folder holding the reference's part modules as a student would submit them."""
    (folder / "cs336_systems").mkdir(parents=True)
    for f in (REPO / "reference_solutions").glob("*.py"):
        if f.name != "__init__.py":
            shutil.copy(f, folder / "cs336_systems" / f.name)
    return folder


def _scores(results: dict) -> dict[str, float]:
    return {f"{t['number']} {t['name']}": t["score"] for t in results.get("tests", [])}


def _grade_args(args) -> list[str]:
    extra = ["--parts", args.parts] if args.parts else []
    return [*extra, "--world-sizes", args.world_sizes]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--times", type=int, default=10, help="grades one after another (default 10)")
    p.add_argument("--concurrent", type=int, default=2, help="grades at the same time, via --batch (default 2)")
    p.add_argument("--parts", default=None, help="only these rubric entries (as scripts.grading --parts)")
    p.add_argument("--world-sizes", default="1,2,4")
    args = p.parse_args()
    runs: list[tuple[str, float, dict]] = []  # (label, seconds, results)
    with tempfile.TemporaryDirectory(prefix="cs336-repeat-") as tmp:
        tmp = Path(tmp)
        sub = _submission(tmp / "reference")
        for i in range(args.times):
            out, start = tmp / f"alone-{i}.json", time.monotonic()
            subprocess.run([sys.executable, "-m", "scripts.grading", str(sub), "--out", str(out), *_grade_args(args)],
                           cwd=REPO, capture_output=True, text=True)  # fmt: skip
            runs.append((f"alone {i + 1}", time.monotonic() - start, json.loads(out.read_text())))
            print(f"{runs[-1][0]}: {runs[-1][2]['score']} in {runs[-1][1]:.0f} s", flush=True)
        if args.concurrent:
            batch = tmp / "batch"
            for j in range(args.concurrent):
                _submission(batch / f"copy{j}")
            start = time.monotonic()
            subprocess.run([sys.executable, "-m", "scripts.grading", "--batch", str(batch), "--jobs",
                            str(args.concurrent), "--results-dir", str(tmp / "batch-results"), *_grade_args(args)],
                           cwd=REPO, capture_output=True, text=True)  # fmt: skip
            seconds = time.monotonic() - start
            for j in range(args.concurrent):
                results = json.loads((tmp / "batch-results" / f"copy{j}.json").read_text())
                runs.append((f"concurrent {j + 1} of {args.concurrent}", seconds, results))
                print(f"{runs[-1][0]}: {results['score']} ({seconds:.0f} s for the batch)", flush=True)
    return _compare(runs)


def _compare(runs: list[tuple[str, float, dict]]) -> int:
    first = _scores(runs[0][2])
    most = round(sum(t["max_score"] for t in runs[0][2].get("tests", [])), 2)
    problems = [f"{label}: {results['score']} of {most}, not full marks" for label, _, results in runs
                if abs(results["score"] - most) > 0.01]  # fmt: skip
    for entry in sorted({e for _, _, r in runs for e in _scores(r)}):
        seen = [_scores(r).get(entry) for _, _, r in runs]
        if len(set(seen)) > 1:
            problems.append(f"{entry}: " + ", ".join(f"{label} {s}" for (label, _, _), s in zip(runs, seen)))
    print(f"\n{len(runs)} grades, {len(first)} entries each; times: "
          + ", ".join(f"{s:.0f} s" for _, s, _ in runs))  # fmt: skip
    print("\n".join(problems) if problems else "every entry scored the same in every grade")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
