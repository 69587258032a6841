"""The GPU acceptance command's plan and runner, checked without a GPU (CI never has one).

pytest tests/staff/grader/test_acceptance.py
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from scripts.grading import acceptance
from tests.harness.pool import ROOT
from tests.staff.test_benchmarks import SMALLEST

pytestmark = pytest.mark.staff


def _args(**kw) -> argparse.Namespace:
    defaults = dict(world_sizes=None, python="python", deadline=120, skip_benchmarks=False)
    return argparse.Namespace(**{**defaults, **kw})


def test_an_eight_gpu_node_runs_every_check_at_every_world_size_and_the_benchmarks_on_all_eight(tmp_path):
    """On 8 GPUs the suite, hidden tests and grader run on NCCL at world sizes 1 to 8, and every benchmark on all
    8 at its measuring sizes (no smallest-size arguments)."""
    checks, benches = acceptance.plan(_args(), gpus=8, out=tmp_path)
    suite, hidden, grade = checks
    for step in checks:
        assert "nccl" in step.command and "--world-sizes=1,2,3,4,5,6,7,8" in step.command, step.command
    assert "tests/staff/hidden" in hidden.command and "scripts.grading" in grade.command
    assert grade.judge is not None, "the grader exits 0 whatever the score: its results.json must be judged"
    assert [b.command[b.command.index("-m", 2) + 1] for b in benches] == [
        f"scripts.bench.{name}" for name in acceptance.BENCHMARKS
    ]
    for b in benches:
        assert "--nproc_per_node=8" in b.command and b.command[-1] == str(tmp_path / "bench"), b.command


def test_one_gpu_runs_world_size_one_and_the_benchmarks_at_their_smallest_sizes(tmp_path):
    """One GPU: world size 1 (NCCL refuses two ranks on one GPU), each benchmark on 1 GPU at its smallest sizes."""
    checks, benches = acceptance.plan(_args(), gpus=1, out=tmp_path)
    assert all("--world-sizes=1" in step.command for step in checks)
    for name, b in zip(acceptance.BENCHMARKS, benches):
        assert "--nproc_per_node=1" in b.command and b.command[-len(SMALLEST[name].split()) :] == SMALLEST[name].split()


def test_asked_world_sizes_above_the_gpu_count_are_dropped():
    """World sizes above the node's GPU count are dropped (none left: world size 1)."""
    assert acceptance.world_sizes("2,4,8", gpus=4) == [2, 4]
    assert acceptance.world_sizes("2,4,8", gpus=1) == [1]
    assert acceptance.world_sizes(None, gpus=3) == [1, 2, 3]


@pytest.mark.parametrize(("scores", "passes"), [([(2, 2), (0, 0)], True), ([(2, 2), (1.5, 2)], False), ([], False)])
def test_the_grader_step_passes_on_full_marks_only(tmp_path, scores, passes):
    """The grader's step passes only when results.json gives every point it lists (and lists some)."""
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"tests": [{"name": f"t{i}", "score": s, "max_score": m}
                                             for i, (s, m) in enumerate(scores)]}))  # fmt: skip
    verdict = acceptance.full_marks(results)()
    assert (verdict is None) == passes, verdict


def test_checks_run_side_by_side_and_a_step_past_its_time_is_stopped(tmp_path):
    """The checks start together (the first waits for a file only the second writes) and one still running when
    the time is up is stopped and fails, saying so in its log."""
    flag = tmp_path / "flag"
    wait = f"import pathlib, time\nwhile not pathlib.Path({str(flag)!r}).exists(): time.sleep(0.05)"
    steps = [
        acceptance.Step("waits", [sys.executable, "-c", wait], tmp_path / "a.log"),
        acceptance.Step("writes", [sys.executable, "-c", f"open({str(flag)!r}, 'w')"], tmp_path / "b.log"),
    ]
    acceptance.run_side_by_side(steps, timeout=30)
    assert [s.passed for s in steps] == [True, True], [s.tail for s in steps]
    slow = acceptance.Step("sleeps", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "c.log")
    acceptance.run_alone([slow], timeout=1)
    assert slow.passed is False and slow.seconds < 30 and "stopped after" in (tmp_path / "c.log").read_text()


def test_without_a_gpu_it_says_so_and_fails():
    """Without a visible CUDA GPU the acceptance command says so and exits 2."""
    env = {"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"}
    command = [sys.executable, "-m", "scripts.grading.acceptance"]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2 and "no CUDA GPU visible" in proc.stderr, proc.stderr
