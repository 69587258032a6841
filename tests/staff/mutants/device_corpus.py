"""Run the device corpus on a GPU and report where device-faithful mode's verdict is not the GPU's (staff only).

    python -m tests.staff.mutants.device_corpus --out out/corpus      # on a lent GPU: NCCL against the mode
    python -m tests.staff.mutants.device_corpus --backends gloo -k header   # the mode alone, here

Each row of ``table_device.py`` is the reference with one edit and a label, what NCCL does with it ("pass" or
"fail") at its check's world sizes. On one GPU everything runs at world size 1, where some edits never run
(a pipeline of one stage sends no header). So each row's slice runs twice at world size 1, through the suite
server: on NCCL (the mode off: the GPU's own errors decide) and on gloo in device-faithful mode. A row DISAGREES
when the two verdicts differ: the mode mispredicts the GPU there; fix the mode or the row (issue 53). The label
is printed beside them, and a row whose check runs at world size 1 must also match it. A slice that runs nothing
at world size 1 is "skipped".
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tests.staff.mutants.runner import run_suite
from tests.staff.mutants.table_device import MUTANTS


def verdict(row, backend: str, world_sizes: str) -> tuple[str, str, float]:
    """("pass" | "fail" | "skipped", the output's tail, seconds) of ``row``'s slice on ``backend``."""
    check = row.checks[0]
    selection = (check.suite + check.select,) if check.select.startswith("::") else (check.suite, "-k", check.select)
    faithful = "--device-faithful" if backend == "gloo" else "--no-device-faithful"
    run = run_suite(f"tests.staff.mutants.{row.id}", *selection, world_sizes=world_sizes, deadline=60,
                    extra=("--backend", backend, faithful))  # fmt: skip
    if run.returncode == 5 or (run.returncode == 0 and " passed" not in run.output):
        return "skipped", run.output[-400:], run.seconds
    return ("pass" if run.returncode == 0 else "fail"), run.output[-1500:], run.seconds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backends", default="nccl,gloo", help="nccl,gloo (a lent GPU), or gloo alone")
    p.add_argument("--world-sizes", default="1", help="NCCL on one GPU: 1 (the default)")
    p.add_argument("-k", default="", help="only rows whose id contains this text")
    p.add_argument("--out", type=Path, default=None, help="a folder for summary.txt and each disagreement's output")
    args = p.parse_args()
    backends = args.backends.split(",")
    rows = [m for m in MUTANTS if args.k in m.id]
    lines, disagree = [], 0
    for row in rows:
        label = "pass" if row.checks[0].passes else "fail"
        got = {b: verdict(row, b, args.world_sizes) for b in backends}
        seen = {got[b][0] for b in backends} - {"skipped"}
        wrong = len(seen) > 1 or (args.world_sizes in row.checks[0].world_sizes.split(",") and seen - {label})
        disagree += bool(wrong)
        verdicts = " ".join(f"{b}={got[b][0]:7s} {got[b][2]:5.1f}s" for b in backends)
        lines.append(f"{row.id:45s} label={label:4s} {verdicts}" + ("  DISAGREES" if wrong else ""))
        print(lines[-1], flush=True)
        if wrong and args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{row.id}.log").write_text("\n\n".join(f"== {b}\n{got[b][1]}" for b in backends))
    lines.append(f"{len(rows)} rows at world size {args.world_sizes} on {args.backends}: {disagree} disagree")
    print(lines[-1])
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "summary.txt").write_text("\n".join(lines) + "\n")
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main())
