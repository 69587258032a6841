"""A TA's first hour on a GPU node: is the kit sound here, on NCCL? One command, one pass/fail report.

    python -m scripts.grading.acceptance                       # every world size from 1 to the node's GPU count
    python -m scripts.grading.acceptance --world-sizes 2,4     # fewer
    python -m scripts.grading.acceptance --skip-benchmarks     # the checks only

Run it from the repository root of the staff checkout, with the Python that has the CUDA build of torch
(``CS336_TORCH=... bash scripts/setup.sh`` installs one into .venv/). It runs, each as its own process:

1. the public suite and the hidden tests against the reference, on NCCL, at every world size the node has GPUs
   for (rank r on cuda:r; NCCL refuses two ranks on one GPU, so a 1-GPU machine runs world size 1, which still
   checks that every tensor follows its device; a test needing more GPUs skips, saying how many);
2. the grader on the reference as a submission (``python -m scripts.grading --backend nccl``): it must give full
   marks (read from its results.json; its exit status is 0 whatever the score);
3. the GPU benchmarks under torchrun at the largest world size, each beside torch's own in the same run:
   all-reduce bus bandwidth against NCCL's built-in per size (``scripts.bench.collectives``), bucketed
   DDP against torch DDP (``scripts.bench.ddp``), FSDP against ``fully_shard`` (``scripts.bench.fsdp``).
   Their tables and plots land in the report's folder; a benchmark passes when it runs to the end. On one GPU
   nothing crosses a GPU boundary, so they run at their smallest sizes (tests/staff/test_benchmarks.py): the
   code path on CUDA is what is checked, not a measurement.

Steps 1 and 2 time nothing, so they run side by side (the node has the cores; on 2026-11-27 the three ran at
once on one H100 in 164 s); the benchmarks time, so each runs alone, after them. On one GPU each check may take
``--timeout`` (default 240 s) and each benchmark ``--bench-timeout`` (default 40 s): the whole run fits in 6
minutes. The report (``out/acceptance/report.md``, printed too) has one line per step: pass or fail, seconds,
and where its log is; then the total time. Exit status 0 only if every step passed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ("collectives", "ddp", "fsdp")
ONE_GPU_BUDGET_S = 360  # the whole run on one GPU: checks side by side, then each benchmark alone


@dataclass
class Step:
    """One command, its log, and after it ends a verdict: exit status 0 and, if given, ``judge()`` (a reason to
    fail, or None)."""

    name: str
    command: list[str]
    log: Path
    judge: Callable[[], str | None] | None = None
    passed: bool | None = None
    seconds: float = 0.0
    tail: str = ""
    _proc: subprocess.Popen | None = None
    _start: float = 0.0

    def start(self) -> None:
        print(f"== {self.name}\n   $ {' '.join(self.command)}", flush=True)
        self._start = time.monotonic()
        with self.log.open("w") as log:  # the child keeps its own copy of the file descriptor
            self._proc = subprocess.Popen(self.command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True)  # fmt: skip

    def finish(self, until: float) -> None:
        """Wait for the command until the monotonic time ``until``; past it, stop it (its whole process group)."""
        try:
            code = self._proc.wait(timeout=max(0.0, until - time.monotonic()))
        except subprocess.TimeoutExpired:
            _stop(self._proc)
            code = None
            with self.log.open("a") as log:
                log.write(f"\n[acceptance] stopped after {time.monotonic() - self._start:.0f} s\n")
        self.seconds = time.monotonic() - self._start
        reason = None if code == 0 or code is None else f"exit status {code}"
        if code == 0 and self.judge is not None:
            reason = self.judge()
        self.passed = code == 0 and reason is None
        lines = self.log.read_text(errors="replace").splitlines()
        self.tail = "\n".join(lines[-3:] + ([f"[acceptance] {reason}"] if reason else []))
        print(f"   {'PASS' if self.passed else 'FAIL'} in {self.seconds:.0f} s (log: {self.log})", flush=True)


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # pytest's rank processes and torchrun's workers too
    except ProcessLookupError:
        pass
    proc.wait()


def run_side_by_side(steps: list[Step], timeout: float) -> None:
    """Start every step at once (they time nothing), then wait for all of them, ``timeout`` seconds in all."""
    for step in steps:
        step.start()
    until = time.monotonic() + timeout
    for step in steps:
        step.finish(until)


def run_alone(steps: list[Step], timeout: float) -> None:
    """One step after another (they time something): ``timeout`` seconds each."""
    for step in steps:
        step.start()
        step.finish(time.monotonic() + timeout)


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def world_sizes(asked: str | None, gpus: int) -> list[int]:
    """Every world size from 1 to the node's GPU count, or the asked ones it has a GPU per rank for (world size 1
    if none fits)."""
    sizes = range(1, gpus + 1) if asked is None else [w for w in (int(s) for s in asked.split(",")) if w <= gpus]
    return list(sizes) or [1]


def full_marks(results: Path) -> Callable[[], str | None]:
    """A judge: the grader's results.json gives the reference every point it could get here."""

    def judge() -> str | None:
        try:
            tests = json.loads(results.read_text()).get("tests", [])
        except (OSError, ValueError) as exc:
            return f"no readable {results.name}: {exc}"
        got, most = sum(t.get("score", 0) for t in tests), sum(t.get("max_score", 0) for t in tests)
        short = [t.get("name", "?") for t in tests if t.get("score", 0) < t.get("max_score", 0)]
        if most == 0 or got < most - 1e-6:
            return f"the grader gave the reference {got:g} / {most:g}; short: {', '.join(short[:8]) or 'none'}"
        return None

    return judge


def plan(args, gpus: int, out: Path) -> tuple[list[Step], list[Step]]:
    """The checks (run side by side) and the benchmarks (run alone, one after another)."""
    py = args.python
    sizes = world_sizes(args.world_sizes, gpus)
    ws = ",".join(map(str, sizes))
    pytest = [py, "-m", "pytest", "--impl", "reference", "--backend", "nccl", f"--world-sizes={ws}", "-q",
              "-p", "no:cacheprovider", f"--deadline={args.deadline}"]  # fmt: skip
    submission = out / "submission"
    checks = [
        Step(f"public suite on NCCL, world sizes {ws}", [*pytest, "tests/", "--ignore=tests/staff"], out / "suite.log"),
        Step(f"hidden tests on NCCL, world sizes {ws}", [*pytest, "tests/staff/hidden"], out / "hidden.log"),
        Step("the grader gives the reference full marks on NCCL",
             [py, "-m", "scripts.grading", str(submission), "--backend", "nccl", f"--world-sizes={ws}",
              "--out", str(out / "results.json"), "--python", py],
             out / "grade.log", judge=full_marks(out / "results.json")),
    ]  # fmt: skip
    benchmarks = []
    if not args.skip_benchmarks:
        n = max(sizes)
        smallest = _smallest_sizes() if n == 1 else {}
        for bench in BENCHMARKS:
            torchrun = [py, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}"]
            command = [*torchrun, "-m", f"scripts.bench.{bench}", "--backend", "nccl", "--out", str(out / "bench"),
                       *smallest.get(bench, "").split()]  # fmt: skip
            benchmarks.append(Step(f"benchmark {bench} on {n} GPU(s), against torch's own", command,
                                   out / f"{bench}.log"))  # fmt: skip
    return checks, benchmarks


def _smallest_sizes() -> dict[str, str]:
    from tests.staff.test_benchmarks import SMALLEST  # one list of each benchmark's smallest arguments

    return SMALLEST


def write_submission(folder: Path) -> None:
    """The reference as a student would hand it in: a folder holding cs336_systems/ with the part modules."""
    target = folder / "cs336_systems"
    target.mkdir(parents=True, exist_ok=True)
    for source in (ROOT / "reference_solutions").glob("*.py"):
        (target / source.name).write_text(source.read_text())


def report(steps: list[Step], gpus: int, seconds: float, out: Path) -> str:
    budget = f" (one GPU: within {ONE_GPU_BUDGET_S // 60} minutes)" if gpus == 1 else ""
    lines = [f"# GPU acceptance: {'PASS' if all(s.passed for s in steps) else 'FAIL'}", "",
             f"{gpus} GPU(s) visible; {seconds:.0f} s in all{budget}. One line per step (the checks ran side by "
             "side, then each benchmark alone); logs and benchmark tables beside this file.", "",
             "| step | result | seconds | log |", "|---|---|---:|---|"]  # fmt: skip
    lines += [f"| {s.name} | {'pass' if s.passed else 'FAIL'} | {s.seconds:.0f} | {s.log.name} |" for s in steps]
    for s in steps:
        if not s.passed:
            lines += ["", f"## {s.name}: last lines of {s.log.name}", "", "```", s.tail, "```"]
    text = "\n".join(lines) + "\n"
    (out / "report.md").write_text(text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-sizes", default=None, help="world sizes to test (default: every one from 1 to the "
                        "GPU count; those above it are dropped)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "acceptance", help="report folder")
    parser.add_argument("--python", default=sys.executable, help="the Python with torch's CUDA build")
    parser.add_argument("--deadline", type=float, default=120, help="per-test deadline in seconds (default 120)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds the checks may take, side by side "
                        "(default 240 on one GPU, 1800 on more)")  # fmt: skip
    parser.add_argument("--bench-timeout", type=float, default=None, help="seconds each benchmark may take "
                        "(default 40 on one GPU, 600 on more)")  # fmt: skip
    parser.add_argument("--skip-benchmarks", action="store_true", help="the checks only")
    args = parser.parse_args()
    gpus = gpu_count()
    if gpus == 0:
        print("no CUDA GPU visible: run this on a GPU node, with torch's CUDA build", file=sys.stderr)
        return 2
    one = gpus == 1
    args.out.mkdir(parents=True, exist_ok=True)
    write_submission(args.out / "submission")
    checks, benchmarks = plan(args, gpus, args.out)
    start = time.monotonic()
    run_side_by_side(checks, args.timeout or (240 if one else 1800))
    run_alone(benchmarks, args.bench_timeout or (40 if one else 600))
    print(report(checks + benchmarks, gpus, time.monotonic() - start, args.out))
    return 0 if all(s.passed for s in checks + benchmarks) else 1


if __name__ == "__main__":
    sys.exit(main())
