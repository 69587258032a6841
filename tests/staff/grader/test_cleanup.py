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


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_the_grader_ends_pytest_and_every_rank_worker(tmp_path, sig):
    """After SIGTERM or SIGINT to a grade whose ranks spin forever, no process the grader started survives."""
    sub = tmp_path / "submission" / "cs336_systems"
    sub.mkdir(parents=True)
    (sub / "collectives.py").write_text(SPINNING)
    cmd = [sys.executable, "-m", "scripts.grade", str(sub.parent), "--out", str(tmp_path / "r.json"),
           "--parts", "collectives", "--select", "all_reduce", "--world-sizes", "2", "--deadline", "60",
           "--timeout", "300"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("CS336_")}
    grader = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        started, tree = time.monotonic(), set()
        while time.monotonic() - started < 90 and len(tree) < 3:  # pytest and at least two rank workers
            time.sleep(1)
            tree = _tree(grader.pid)
        assert len(tree) >= 3, f"the grade never started its rank workers (processes below it: {sorted(tree)})"
        time.sleep(2)
        tree |= _tree(grader.pid)
        grader.send_signal(sig)
        grader.wait(timeout=60)
        time.sleep(1)
        survivors = [pid for pid in tree if _alive(pid)]
        assert not survivors, f"{len(survivors)} of {len(tree)} processes outlived the grader after {sig.name}: " + (
            ", ".join(open(f"/proc/{p}/cmdline").read().replace("\0", " ")[:120] for p in survivors if _alive(p))
        )
    finally:
        if grader.poll() is None:
            grader.kill()
