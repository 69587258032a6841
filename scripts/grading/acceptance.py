"""A TA's first hour on a GPU node: is the kit sound here, on NCCL? One command, one pass/fail report.

    python -m scripts.grading.acceptance                       # every GPU of the node, world sizes 2,4,8
    python -m scripts.grading.acceptance --world-sizes 2,4     # fewer
    python -m scripts.grading.acceptance --skip-benchmarks     # the checks only (a few minutes)

Run it from the repository root of the staff checkout, with the Python that has the CUDA build of torch
(``CS336_TORCH=... bash scripts/setup.sh`` installs one into .venv/). It runs, each as its own process:

1. the public suite and the hidden tests against the reference, on NCCL, at the world sizes the node
   has GPUs for (rank r on cuda:r; NCCL refuses two ranks on one GPU, so a 1-GPU machine runs world
   size 1 only, which still checks that every tensor follows its device);
2. the grader on the reference as a submission (``python -m scripts.grading --backend nccl``): full marks;
3. the GPU benchmarks under torchrun at the largest world size, each beside torch's own in the same run:
   all-reduce bus bandwidth against NCCL's built-in per size (``scripts.bench.collectives``), bucketed
   DDP against torch DDP (``scripts.bench.ddp``), FSDP against ``fully_shard`` (``scripts.bench.fsdp``).
   Their tables and plots land in the report's folder; a benchmark passes when it runs to the end.

The report (``out/acceptance/report.md``, printed too) has one line per step: pass or fail, seconds,
and where its log is. Exit status 0 only if every step passed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ("collectives", "ddp", "fsdp")


@dataclass
class Step:
    name: str
    command: list[str]
    log: Path
    passed: bool | None = None
    seconds: float = 0.0
    tail: str = ""

    def run(self, timeout: float) -> None:
        print(f"== {self.name}\n   $ {' '.join(self.command)}", flush=True)
        start = time.monotonic()
        try:
            with self.log.open("w") as log:
                proc = subprocess.run(self.command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=timeout)
            self.passed = proc.returncode == 0
        except subprocess.TimeoutExpired:
            self.passed = False
            self.log.open("a").write(f"\n[acceptance] stopped after {timeout:.0f} s\n")
        self.seconds = time.monotonic() - start
        lines = self.log.read_text(errors="replace").splitlines()
        self.tail = "\n".join(lines[-3:])
        print(f"   {'PASS' if self.passed else 'FAIL'} in {self.seconds:.0f} s (log: {self.log})", flush=True)


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def world_sizes(asked: str, gpus: int) -> list[int]:
    """The asked world sizes that this node has a GPU per rank for (world size 1 if none fits)."""
    sizes = [w for w in (int(s) for s in asked.split(",")) if w <= gpus]
    return sizes or [1]


def plan(args, gpus: int, out: Path) -> list[Step]:
    py = args.python
    sizes = world_sizes(args.world_sizes, gpus)
    ws = ",".join(map(str, sizes))
    pytest = [py, "-m", "pytest", "--impl", "reference", "--backend", "nccl", f"--world-sizes={ws}", "-q",
              "-p", "no:cacheprovider", f"--deadline={args.deadline}"]  # fmt: skip
    submission = out / "submission"
    steps = [
        Step(f"public suite on NCCL, world sizes {ws}", [*pytest, "tests/", "--ignore=tests/staff"], out / "suite.log"),
        Step(f"hidden tests on NCCL, world sizes {ws}", [*pytest, "tests/staff/hidden"], out / "hidden.log"),
        Step("the grader gives the reference full marks on NCCL",
             [py, "-m", "scripts.grading", str(submission), "--backend", "nccl", f"--world-sizes={ws}",
              "--out", str(out / "results.json"), "--python", py],
             out / "grade.log"),
    ]  # fmt: skip
    if not args.skip_benchmarks:
        n = max(sizes)
        for bench in BENCHMARKS:
            torchrun = [py, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}"]
            command = [*torchrun, "-m", f"scripts.bench.{bench}", "--backend", "nccl", "--out", str(out / "bench")]
            steps.append(Step(f"benchmark {bench} on {n} GPU(s), against torch's own", command, out / f"{bench}.log"))
    return steps


def write_submission(folder: Path) -> None:
    """The reference as a student would hand it in: a folder holding cs336_systems/ with the part modules."""
    target = folder / "cs336_systems"
    target.mkdir(parents=True, exist_ok=True)
    for source in (ROOT / "reference_solutions").glob("*.py"):
        (target / source.name).write_text(source.read_text())


def report(steps: list[Step], gpus: int, out: Path) -> str:
    lines = [f"# GPU acceptance: {'PASS' if all(s.passed for s in steps) else 'FAIL'}", "",
             f"{gpus} GPU(s) visible. One line per step; logs and benchmark tables beside this file.", "",
             "| step | result | seconds | log |", "|---|---|---:|---|"]  # fmt: skip
    lines += [f"| {s.name} | {'pass' if s.passed else 'FAIL'} | {s.seconds:.0f} | {s.log.name} |" for s in steps]
    failed = [s for s in steps if not s.passed]
    for s in failed:
        lines += ["", f"## {s.name}: last lines of {s.log.name}", "", "```", s.tail, "```"]
    text = "\n".join(lines) + "\n"
    (out / "report.md").write_text(text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-sizes", default="2,4,8", help="world sizes to test (those above the GPU count are "
                        "dropped; default 2,4,8)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "acceptance", help="report folder")
    parser.add_argument("--python", default=sys.executable, help="the Python with torch's CUDA build")
    parser.add_argument("--deadline", type=float, default=120, help="per-test deadline in seconds (default 120)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds allowed to each step (default 1800)")
    parser.add_argument("--skip-benchmarks", action="store_true", help="the checks only")
    args = parser.parse_args()
    gpus = gpu_count()
    if gpus == 0:
        print("no CUDA GPU visible: run this on a GPU node, with torch's CUDA build", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    write_submission(args.out / "submission")
    steps = plan(args, gpus, args.out)
    for step in steps:
        step.run(args.timeout)
    print(report(steps, gpus, args.out))
    return 0 if all(s.passed for s in steps) else 1


if __name__ == "__main__":
    sys.exit(main())
