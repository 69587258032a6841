"""Every test at every world size the harness accepts: passes, or skips saying which constraint (staff only).

    python -m scripts.grading.world_sizes                    # public and hidden, world sizes 1..8, the reference
    python -m scripts.grading.world_sizes --sizes 3,5 --public-only

Runs the suite once per world size (``--world-sizes N``, device-faithful) and prints a table: passed, failed,
skipped, seconds. It fails (exit 1) on any failure or error, and on a skip whose reason names no constraint (a
number of ranks, experts, stages or GPUs, or the sizes a test runs at): a test whose own sizes do not fit a world
size must derive them from the world size or skip saying why. CI runs the public suite at 3 and grades the
reference at 2, 4 and 8 (.ci/run); run this before a term and after adding tests (about 35 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|errors?)")
SKIP = re.compile(r"^SKIPPED \[\d+\] (\S+?):\d+: (.*)$", re.M)
# A reason names its constraint when it carries a number (ranks, experts, layers, GPUs, the sizes a test runs at),
# in digits or words, or the backend it needs.
NAMES_A_CONSTRAINT = re.compile(r"\d|\b(one|two|three|four|five|six|seven|eight)\b|world size|GPU|gloo|NCCL", re.I)


def run_size(size: int, public_only: bool, impl: str) -> tuple[dict[str, int], list[str], list[str], float]:
    """(counts, failing node ids, skip reasons that name no constraint, seconds) at one world size."""
    paths = ["tests/"] if public_only else ["tests/", "tests/staff/hidden"]
    ignore = ["--ignore=tests/staff"] if public_only else [f"--ignore=tests/staff/{d}" for d in
                                                          ("grader", "mutants", "alt_impl")]  # fmt: skip
    if not public_only:
        ignore += [f"--ignore=tests/staff/{f}" for f in ("test_benchmarks.py", "test_figures.py", "test_stubs.py",
                                                          "test_answer_key.py", "test_kit_links.py")]  # fmt: skip
    cmd = [sys.executable, "-m", "pytest", *paths, *ignore, "--impl", impl, "-q", "-rfEs", "--world-sizes", str(size),
           "--deadline", "90", "--device-faithful", "-p", "no:cacheprovider"]  # fmt: skip
    start = time.monotonic()
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True).stdout
    counts = {kind.rstrip("s") if kind.startswith("error") else kind: int(n) for n, kind in SUMMARY.findall(out)}
    failing = re.findall(r"^(?:FAILED|ERROR) (\S+)", out, re.M)
    vague = sorted({f"{path}: {why}" for path, why in SKIP.findall(out) if not NAMES_A_CONSTRAINT.search(why)})
    return counts, failing, vague, time.monotonic() - start


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1,2,3,4,5,6,7,8", help="comma-separated world sizes (default 1..8)")
    p.add_argument("--public-only", action="store_true", help="leave the hidden tests out")
    p.add_argument("--impl", default="reference", help="the implementation (default: the staff reference)")
    args = p.parse_args(argv)
    print("| world size | passed | failed | skipped | seconds |\n|---:|---:|---:|---:|---:|")
    problems = []
    for size in [int(s) for s in args.sizes.split(",")]:
        counts, failing, vague, seconds = run_size(size, args.public_only, args.impl)
        failed = counts.get("failed", 0) + counts.get("error", 0)
        print(f"| {size} | {counts.get('passed', 0)} | {failed} | {counts.get('skipped', 0)} | {seconds:.0f} |",
              flush=True)  # fmt: skip
        problems += [f"w{size}: {f}" for f in failing] + [f"w{size}: a skip names no constraint: {v}" for v in vague]
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
