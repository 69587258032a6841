"""The GPU acceptance command's plan, checked without a GPU (CI never has one).

pytest tests/staff/grader/test_acceptance.py
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from scripts.grading import acceptance
from tests.harness.pool import ROOT

pytestmark = pytest.mark.staff


def _args(**kw) -> argparse.Namespace:
    defaults = dict(world_sizes="2,4,8", python="python", deadline=120, timeout=60, skip_benchmarks=False)
    return argparse.Namespace(**{**defaults, **kw})


def test_an_eight_gpu_node_runs_every_check_at_2_4_8_and_the_benchmarks_on_all_eight(tmp_path):
    """On 8 GPUs the plan runs the suite, hidden tests and grader on NCCL at 2, 4, 8, and every benchmark on all 8."""
    steps = acceptance.plan(_args(), gpus=8, out=tmp_path)
    suite, hidden, grade, *benches = steps
    for step in (suite, hidden, grade):
        assert "nccl" in step.command and "--world-sizes=2,4,8" in step.command, step.command
    assert "tests/staff/hidden" in hidden.command and "scripts.grading" in grade.command
    assert [b.command[b.command.index("-m", 2) + 1] for b in benches] == [
        f"scripts.bench.{name}" for name in acceptance.BENCHMARKS
    ]
    assert all("--nproc_per_node=8" in b.command for b in benches)


def test_a_node_with_fewer_gpus_drops_the_world_sizes_it_cannot_hold():
    """World sizes above the node's GPU count are dropped (one GPU: world size 1 only)."""
    assert acceptance.world_sizes("2,4,8", gpus=4) == [2, 4]
    assert acceptance.world_sizes("2,4,8", gpus=1) == [1]  # NCCL refuses two ranks on one GPU


def test_without_a_gpu_it_says_so_and_fails():
    """Without a visible CUDA GPU the acceptance command says so and exits 2."""
    env = {"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"}
    command = [sys.executable, "-m", "scripts.grading.acceptance"]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2 and "no CUDA GPU visible" in proc.stderr, proc.stderr
