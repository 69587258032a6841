"""The grader ends every process it started when it is told to stop (staff only).

    pytest tests/staff/grader/test_cleanup.py -v

A TA presses Ctrl-C, a batch system sends SIGTERM at its time limit, or the shell that started the grade
dies: pytest and the rank workers (which may be spinning in a student's infinite loop) must not live on,
holding cores and ports on a shared machine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.harness.pool import ROOT as REPO
from tests.staff.grader import grader_env

pytestmark = pytest.mark.staff

SPINNING = (
    (REPO / "reference_solutions" / "collectives.py").read_text()
    + "\n\ndef all_reduce(tensor, op='sum', group=None, *, algorithm='auto'):\n    while True:\n        pass\n"
)


def _tree(root: int) -> set[int]:
    """Every live descendant of ``root`` (by parent pid, from ps)."""
    rows = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout.split("\n")
    children: dict[int, list[int]] = {}
    for row in rows:
        if row.strip():
            pid, ppid = map(int, row.split())
            children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        for c in children.get(todo.pop(), []):
            found.add(c)
            todo.append(c)
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


def _grade_cmd(tmp_path) -> list[str]:
    """A grade of the spinning all_reduce (two ranks busy forever until a deadline far away)."""
    sub = tmp_path / "submission" / "cs336_systems"
    sub.mkdir(parents=True)
    (sub / "collectives.py").write_text(SPINNING)
    return [sys.executable, "-m", "scripts.grading", str(sub.parent), "--out", str(tmp_path / "r.json"),
            "--parts", "collectives", "--select", "all_reduce", "--world-sizes", "2", "--deadline", "60",
            "--timeout", "300"]  # fmt: skip


def _started_tree(root: int, least: int) -> set[int]:
    """The processes below ``root`` once at least ``least`` of them run (pytest and its rank workers)."""
    started, tree = time.monotonic(), set()
    while time.monotonic() - started < 90 and len(tree) < least:
        time.sleep(1)
        tree = _tree(root)
    assert len(tree) >= least, f"the grade never started its rank workers (processes below it: {sorted(tree)})"
    time.sleep(2)
    return tree | _tree(root)


def _survivors(tree: set[int], within: float) -> list[int]:
    """The processes of ``tree`` still alive after ``within`` seconds (polled)."""
    until = time.monotonic() + within
    while time.monotonic() < until and any(_alive(p) for p in tree):
        time.sleep(0.5)
    return [pid for pid in tree if _alive(pid)]


def _describe(pids: list[int]) -> str:
    out = []
    for pid in pids:
        try:
            out.append(open(f"/proc/{pid}/cmdline").read().replace("\0", " ")[:120])
        except OSError:
            pass
    return ", ".join(out)


def _assert_none_survive(tree: set[int], within: float, what: str) -> None:
    survivors = _survivors(tree, within)
    assert not survivors, f"{len(survivors)} of {len(tree)} processes outlived {what}: {_describe(survivors)}"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_the_grader_ends_pytest_and_every_rank_worker(tmp_path, sig):
    """After SIGTERM or SIGINT to a grade whose ranks spin forever, no process the grader started survives."""
    grader = subprocess.Popen(_grade_cmd(tmp_path), cwd=REPO, env=grader_env(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        tree = _started_tree(grader.pid, 3)  # pytest and at least two rank workers
        grader.send_signal(sig)
        grader.wait(timeout=60)
        _assert_none_survive(tree, 1, f"the grader after {sig.name}")
    finally:
        if grader.poll() is None:
            grader.kill()


def test_the_death_of_the_graders_parent_ends_every_process_it_started(tmp_path):
    """The shell or batch system that started a grade is killed (SIGKILL: it cannot pass anything on): the
    grader, its pytest and every rank worker end too, within a minute."""
    keep_alive = "import subprocess, sys, time\nsubprocess.Popen(sys.argv[1:])\ntime.sleep(3600)\n"
    parent = subprocess.Popen([sys.executable, "-c", keep_alive, *_grade_cmd(tmp_path)], cwd=REPO, env=grader_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    tree: set[int] = set()
    try:
        tree = _started_tree(parent.pid, 4)  # the grader, pytest and at least two rank workers
        parent.kill()
        parent.wait(timeout=10)
        _assert_none_survive(tree, 60, "the grader's parent")
    finally:
        if parent.poll() is None:
            parent.kill()
        for pid in _survivors(tree, 0):  # what a failing run left behind
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
