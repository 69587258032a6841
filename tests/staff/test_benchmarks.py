"""Every benchmark in scripts/bench/ runs to the end on the staff reference, at its smallest sizes.

    pytest tests/staff/test_benchmarks.py

The benchmarks are how the course measures speed (never a timed test), and nothing else runs them:
a refactor of a reference module or of scripts/bench/common.py could break one silently until a student or a TA
runs it. Each runs here as a student would (``python -m scripts.bench.X``), in a subprocess, with
the smallest sizes that still go through every code path (every schedule, world sizes with and
without folds, the fit and the plot), and must exit 0 and write its table or figure under --out.
The numbers are not judged: at these sizes they mean nothing.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.harness.pool import ROOT

pytestmark = pytest.mark.staff

# script -> arguments that keep it to a few seconds; the defaults are for measuring.
SMALLEST = {
    "parallelize": "--d-model 32 --layers 2 --heads 4 --kv-heads 2 --d-ff 64 --batch 4 --seq 16 --steps 1 --warmup 0 "
    "--microbatches 2",  # 2: pp2xfsdp2 runs too (4 rows over dp 2 x 2 microbatches)
    "checkpoint": "--world-sizes 1,2 --sizes-mb 1 --rounds 1",
    "collectives": "--world-sizes 1,2,3 --samples 2 --max-size 16384",  # 1: a one-GPU node
    "context_parallel": "--world-sizes 1,2 --seqs 64 --heads 2 --head-dim 8 --iters 1 --warmup 0",
    "ddp": "--layers 1 --d-model 32 --d-ff 64 --batch 4 --caps 0.01,1 --steps 1 --rounds 1 --warmup 1",
    "expert_parallel": "--world-sizes 2 --tokens 32 --d-model 16 --d-ff 32 --experts 4 --skews 0,0.5 --iters 1",
    "fault_tolerance": "--world-sizes 2 --widths 16 --repeats 1 --steps 4 --checkpoint-every 2 --kill-step 3",
    "fsdp": "--world-sizes 1,2 --layers 1 --d-model 32 --d-ff 64 --batch 4 --steps 1",
    "sharded_optimizer": "--world-sizes 1,2 --layers 1 --d-model 32 --d-ff 64 --batch 4 --steps 1",
    "mesh": "--layers 4 --d-model 32 --batch 16 --microbatches 2 --steps 1",
    "pipeline": "--stages 2 --microbatches 1,2,4 --forward-ms 1 --backward-ms 1 --weight-ms 1 --steps 2 "
    "--gantt 2,2 --d-model 32 --layers 4 --batch 8 --step-microbatches 4 --step-repeats 1",  # m = 4: DualPipeV's 2p
    "tensor_parallel": "--tp-sizes 1,2 --seq 8 --batch 2 --d-model 32 --d-ff 64 --iters 3",
}


def test_every_benchmark_is_listed():
    """A new benchmark gets a line in SMALLEST (not common and zero, shared code; nor harness: not a part)."""
    found = {p.stem for p in (ROOT / "scripts" / "bench").glob("*.py")} - {"__init__", "common", "zero", "harness"}
    assert found == set(SMALLEST), f"scripts/bench/ has {sorted(found)}, SMALLEST lists {sorted(SMALLEST)}"


@pytest.mark.parametrize("script", sorted(SMALLEST))
def test_benchmark_runs_and_writes_its_results(script, tmp_path):
    """``python -m scripts.bench.<script> --impl reference`` at its smallest sizes exits 0 and writes a CSV or PNG."""
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        f"scripts.bench.{script}",
        "--impl",
        "reference",
        "--out",
        str(out),
        *SMALLEST[script].split(),
    ]
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired as exc:
        printed = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        pytest.fail(f"{' '.join(cmd)} ran past 240 s:\n{printed[-3000:]}")
    tail = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}:\n{tail}"
    written = sorted(p.name for p in out.rglob("*") if p.suffix in (".csv", ".png") and p.stat().st_size > 0)
    assert written, f"{' '.join(cmd)} wrote no CSV or PNG under {out}:\n{tail}"
