"""The grader against buggy and hostile submissions, each built on the fly from the reference (staff only).

    pytest tests/staff/grader/test_grade.py -v

Each case copies reference_solutions/collectives.py into a temporary submission, breaks ``all_reduce``
(or the module's import) in one hostile way, grades two tests of part 1 at world size 2 through
``python -m scripts.grading`` in a subprocess, and checks: the attacked test scores 0 with a clear message, the
untouched test (broadcast) still scores full marks, the grade ends in time and leaves no process.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness.pool import ROOT as REPO
from tests.staff.grader import grader_env

pytestmark = pytest.mark.staff

REFERENCE = (REPO / "reference_solutions" / "collectives.py").read_text()
ATTACKED = "all_reduce_sums_in_place_on_every_rank"
CONTROL = "broadcast_copies_src_tensor_to_every_rank"
SELECT = f"({ATTACKED} or {CONTROL}) and float32 and not last"

# name -> (code appended to the module (redefining all_reduce) or prepended (import time), expected text)
ALL_REDUCE = "\nimport os\n\n\ndef all_reduce(tensor, op='sum', group=None, *, algorithm='auto'):\n"
CASES = {
    "infinite_loop": (ALL_REDUCE + "    while True:\n        pass\n", "hung: no answer within"),
    "deadlock": (ALL_REDUCE + "    if dist.get_rank() == 0:\n        dist.recv(tensor, src=1)\n", "hung"),
    "os_exit": (ALL_REDUCE + "    import os\n    os._exit(0)\n", "exited with code 0"),
    "segfault": (ALL_REDUCE + "    import ctypes\n    ctypes.string_at(0)\n", "SIGSEGV"),
    "fake_summary": (
        ALL_REDUCE + "    print('=== 99 passed in 0.1s ===')\n    print('{\"score\": 100}')\n    tensor.zero_()\n",
        "elements differ",
    ),
    "monkeypatch_torch": (
        "\nimport torch, torch.testing, _pytest.outcomes\ntorch.allclose = lambda *a, **k: True\n"
        "torch.equal = lambda *a, **k: True\ntorch.isclose = lambda a, b, **k: torch.ones_like(a, dtype=torch.bool)\n"
        "torch.testing.assert_close = lambda *a, **k: None\ndist.all_reduce = lambda *a, **k: None\n"
        "_pytest.outcomes.fail = lambda *a, **k: None\n" + ALL_REDUCE + "    tensor.add_(1)\n",
        "elements differ",
    ),
    "import_reference": (
        ALL_REDUCE + "    from reference_solutions.collectives import all_reduce as ar\n    ar(tensor, op, group)\n",
        "not available to submissions",
    ),
    "big_output": (
        ALL_REDUCE + "    import sys\n    chunk = 'x' * (1 << 20)\n    for _ in range(100):\n"
        "        sys.stdout.write(chunk)\n    raise RuntimeError('after 100 MB')\n",
        "File too large",
    ),
    "memory_hog": (
        ALL_REDUCE + "    hog = []\n    while True:\n        hog.append(bytearray(1 << 29))\n",
        # Reaching the cap means writing ~3 GB: on a loaded machine the deadline may come first.
        ("MemoryError", "hung: no answer within"),
    ),
    "orphan_process": (
        ALL_REDUCE + "    import subprocess\n    subprocess.Popen(['sleep', '1000.5'], start_new_session=True)\n"
        "    if os.fork() == 0:\n        os.setsid()\n        os.execvp('sleep', ['sleep', '1000.5'])\n"
        "    tensor.zero_()\n",
        "elements differ",
    ),
    "kill_the_judge": (
        # The judge is the rank's parent, or the zygote's parent when the rank was forked by one
        # (tests/harness/zygote.py): the pytest process that started the pool.
        ALL_REDUCE + "    import signal\n    pid = os.getppid()\n"
        "    if b'zygote.py' in open(f'/proc/{pid}/cmdline', 'rb').read():\n"
        "        pid = int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[1])\n"
        "    os.kill(pid, signal.SIGKILL)\n",
        "test process died",
    ),
    "forged_reply": (
        ALL_REDUCE + "    import pickle, struct, sys\n    fd = int(sys.argv[sys.argv.index('--fd') + 1])\n"
        "    class Evil:\n        def __reduce__(self):\n"
        '            return (exec, (\'open("/tmp/cs336-pwned", "w").write("x")\',))\n'
        "    data = pickle.dumps({'task': 0, 'status': 'ok', 'value': Evil()})\n"
        "    os.write(fd, struct.pack('!i', len(data)) + data)\n    import time\n    time.sleep(60)\n",
        "reply was refused",
    ),
    "write_fake_results": (
        ALL_REDUCE + "    from pathlib import Path\n    import json\n"
        "    for p in [Path(os.environ.get('CS336_FAKE_OUT', '/nonexistent')), Path.cwd() / 'results.json']:\n"
        "        try:\n            p.write_text(json.dumps({'score': 1000, 'tests': []}))\n        except OSError:\n"
        "            pass\n    for t in Path.cwd().glob('tests/*.py'):\n"
        "        t.write_text('def test_fake():\\n    pass\\n')\n    tensor.zero_()\n",
        "elements differ",
    ),
}
IMPORT_CASES = {
    "sys_exit_at_import": ("import sys\nsys.exit(0)\n", "SystemExit"),
    "exception_at_import": ("raise RuntimeError('broken at import')\n", "broken at import"),
    # The first case shows how the rank died; later ones fail at once instead of starting new pools.
    "os_exit_at_import": ("import os\nos._exit(3)\n", ("exited with code 3", "is not imported again")),
}


def _grade(tmp_path: Path, source: str, timeout: float = 150, select: str = SELECT, module: str = "collectives",
           extra: tuple[str, ...] = ()) -> tuple[dict, float, subprocess.CompletedProcess]:  # fmt: skip
    sub = tmp_path / "submission" / "cs336_systems"
    sub.mkdir(parents=True)
    (sub / f"{module}.py").write_text(source)
    out = tmp_path / "results.json"
    cmd = [sys.executable, "-m", "scripts.grading", str(sub.parent), "--out", str(out), "--parts",
           module, "--select", select, "--world-sizes", "2", "--deadline", "6", "--test-timeout", "40",
           "--timeout", "120", "--memory-mb", "3000", *extra]  # fmt: skip
    env = grader_env()
    env["CS336_FAKE_OUT"] = str(out)
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    return json.loads(out.read_text()), time.monotonic() - start, proc


def _by_name(results: dict) -> dict:
    return {t["name"]: t for t in results["tests"]}


def _leftover_sleepers() -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "sleep 1000.5" in line]


def _assert_only_the_attack_lost(results: dict, expect: str | tuple[str, ...]) -> None:
    """The attacked test scored 0 and its output shows ``expect`` (or one of them); broadcast kept full marks,
    and the total is broadcast's alone; no process the submission started is left."""
    tests = _by_name(results)
    attacked, control = tests[f"test_{ATTACKED}"], tests[f"test_{CONTROL}"]
    assert attacked["score"] == 0 and attacked["status"] == "failed", attacked
    expected = expect if isinstance(expect, tuple) else (expect,)
    assert any(e in attacked["output"] for e in expected), attacked["output"]
    assert control["score"] == control["max_score"] > 0, control["output"]
    assert results["score"] == control["max_score"] < 1000
    assert not _leftover_sleepers(), _leftover_sleepers()


@pytest.mark.parametrize("case", CASES)
def test_a_hostile_all_reduce_scores_zero_and_the_rest_is_still_graded(tmp_path, case):
    """A hostile all_reduce scores 0 with a telling message; broadcast still gets full marks, in time, no leftovers."""
    code, expect = CASES[case]
    results, seconds, _ = _grade(tmp_path, REFERENCE + code)
    _assert_only_the_attack_lost(results, expect)
    assert seconds < 120, f"grading took {seconds:.0f} s"
    assert not Path("/tmp/cs336-pwned").exists(), "a forged reply ran code in the judge"


@pytest.mark.parametrize("case", IMPORT_CASES)
def test_a_module_that_fails_at_import_scores_zero_with_the_reason(tmp_path, case):
    """A module that exits or raises at import scores 0 on every test, and each test's output says why."""
    code, expect = IMPORT_CASES[case]
    head, future, rest = REFERENCE.partition("from __future__ import annotations\n")
    results, seconds, _ = _grade(tmp_path, head + future + code + rest)
    assert results["score"] == 0 and results["tests"], results
    expected = expect if isinstance(expect, tuple) else (expect,)
    for t in results["tests"]:
        assert t["status"] == "failed" and any(e in t["output"] for e in expected), t["output"]
    if case == "os_exit_at_import":
        died = sum(t["output"].count("exited with code 3") for t in results["tests"])
        assert died <= 2, f"the module ended {died} rank processes: each later case paid a new pool"


def test_the_reference_gets_full_marks_and_the_stub_gets_zero(tmp_path):
    """The reference scores full marks; the untouched stub scores 0 with its NotImplementedError and handout."""
    ref, seconds, _ = _grade(tmp_path / "ref", REFERENCE)
    assert ref["score"] == sum(t["max_score"] for t in ref["tests"]) > 0, ref["output"]
    stub = (REPO / "cs336_systems" / "collectives.py").read_text()
    res, _, _ = _grade(tmp_path / "stub", stub)
    assert res["score"] == 0
    for t in res["tests"]:
        assert "NotImplementedError: Task 1." in t["output"] and "handouts/01-collectives.md" in t["output"], t


DEADLOCKED_BROADCAST = """

def broadcast(tensor, src=0, group=None):
    dist.recv(tensor, src=1 - dist.get_rank())  # both ranks wait: a deadlock
    return tensor
"""


def test_a_deadlocked_function_costs_one_deadline_and_only_its_own_tests(tmp_path):
    """Once broadcast hangs, later tests that call it (from other rank functions, and in the hidden run) fail at
    once, pointing to the test where it hung, and tests of other functions run by the same rank function pass."""
    select = "broadcast_copies or collectives_on_a_subgroup or reduce_sums_into_dst or back_to_back"
    log = tmp_path / "staff.log"  # pytest's own output, hidden run included (its entries are redacted)
    results, seconds, _ = _grade(tmp_path, REFERENCE + DEADLOCKED_BROADCAST, select=select,
                                 extra=("--staff-log", str(log)))  # fmt: skip
    tests = _by_name(results)
    assert tests["test_broadcast_copies_src_tensor_to_every_rank"]["score"] == 0
    reduce = tests["test_reduce_sums_into_dst_and_leaves_others_unchanged"]
    assert reduce["score"] == reduce["max_score"] > 0, f"a broadcast hang failed reduce too:\n{reduce['output']}"
    subgroup = tests["test_collectives_on_a_subgroup_use_global_src_dst_and_group_order"]
    assert "cs336_systems.collectives.broadcast was not run: it hung in an earlier test" in subgroup["output"], (
        subgroup["output"]
    )
    # The hidden run is a new pytest process: it is told what hung in the public one and does not wait again.
    hidden = log.read_text().partition("[grader] hidden tests")[2]
    assert "broadcast was not run: it hung in an earlier test" in hidden, hidden[-3000:]
    assert "no answer within" not in hidden, f"the hidden run waited for broadcast to hang again:\n{hidden[-3000:]}"
    assert seconds < 150, f"grading took {seconds:.0f} s"


DDP_REFERENCE = (REPO / "reference_solutions" / "ddp.py").read_text()
WAIT_FOR_ALL_REDUCES = """        for work, p in self._pending:
            work.wait()
            p.grad.div_(self.world_size)
"""


def test_a_deadlocked_method_is_refused_like_a_function(tmp_path):
    """A method that hangs (rank 0 waits in a barrier the others never join) is not run again in later cases
    (they fail at once, naming it with its class); the other class, run by the same rank function, is graded."""
    assert DDP_REFERENCE.count(WAIT_FOR_ALL_REDUCES) == 1
    deadlock = "        if dist.get_rank() == 0:\n            dist.barrier()\n"
    source = DDP_REFERENCE.replace(WAIT_FOR_ALL_REDUCES, deadlock + WAIT_FOR_ALL_REDUCES)
    select = "sgd_steps_match and (individual or bucketed-inf)"
    log = tmp_path / "staff.log"  # pytest's own output: every case's failure (the entry shows the first)
    results, seconds, _ = _grade(tmp_path, source, select=select, module="ddp", extra=("--staff-log", str(log)))
    entry = _by_name(results)["test_sgd_steps_match_one_process_on_the_whole_batch"]
    assert 0 < entry["score"] < entry["max_score"], entry  # the bucketed cases pass, the individual ones fail
    cut = "cs336_systems.ddp.DDPIndividualParameters.finish_gradient_synchronization was not run: it hung"
    assert cut in log.read_text(), log.read_text()[-3000:]
    assert seconds < 120, f"grading took {seconds:.0f} s"


def _grade_part_1(folder: Path, source: str) -> tuple[dict, float]:
    """Part 1 in full (world sizes 1, 2, 4; public and hidden tests), deadline 10 s: results and seconds."""
    sub = folder / "submission" / "cs336_systems"
    sub.mkdir(parents=True)
    (sub / "collectives.py").write_text(source)
    shutil.copy(REPO / "reference_solutions" / "accounting.py", sub)  # task 1.7's cost model lives there
    out = folder / "results.json"
    cmd = [sys.executable, "-m", "scripts.grading", str(sub.parent), "--out", str(out), "--parts", "collectives",
           "--deadline", "10"]  # fmt: skip
    env = grader_env()
    start = time.monotonic()
    subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    return json.loads(out.read_text()), time.monotonic() - start


def test_one_deadlocked_function_grades_within_twice_the_reference_time(tmp_path):
    """The whole of part 1 with a deadlocked broadcast takes at most twice as long as the reference's grade,
    and every test that does not need broadcast keeps its points."""
    reference, reference_s = _grade_part_1(tmp_path / "reference", REFERENCE)
    most = sum(t["max_score"] for t in reference["tests"])
    assert reference["score"] == pytest.approx(most, abs=0.01), reference["output"]
    hanging, hanging_s = _grade_part_1(tmp_path / "hanging", REFERENCE + DEADLOCKED_BROADCAST)
    assert hanging_s <= 2 * reference_s, f"{hanging_s:.0f} s, the reference {reference_s:.0f} s"
    lost = {t["name"].removesuffix(" (hidden test)") for t in hanging["tests"] if t["score"] < t["max_score"]}
    callers_of_broadcast = {"test_broadcast_copies_src_tensor_to_every_rank",
                            "test_collectives_on_a_subgroup_use_global_src_dst_and_group_order",
                            "test_bad_input_raises_on_every_rank_before_communicating",
                            "test_back_to_back_collectives_on_odd_world_sizes"}  # fmt: skip
    assert "test_broadcast_copies_src_tensor_to_every_rank" in lost and lost <= callers_of_broadcast, lost


# The cases whose outcome depends on time (a hang must meet its deadline, a hog its memory cap, a flood its
# file cap, before the test's own timeout): they must hold on a machine that a second grade keeps busy.
TIMING_SENSITIVE = ["infinite_loop", "deadlock", "big_output", "memory_hog"]


@pytest.fixture(scope="module")
def second_grade(tmp_path_factory):
    """A grade of the reference's part 1 (world sizes 2 and 4) running beside the test, restarted whenever it
    ends, so both cores stay busy the whole time."""
    folder = tmp_path_factory.mktemp("second-grade")
    sub = folder / "submission" / "cs336_systems"
    sub.mkdir(parents=True)
    (sub / "collectives.py").write_text(REFERENCE)
    cmd = [sys.executable, "-m", "scripts.grading", str(sub.parent), "--out", str(folder / "results.json"),
           "--parts", "collectives", "--world-sizes", "2,4"]  # fmt: skip
    env = grader_env()

    def start():
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    box = {"proc": start()}

    def busy() -> None:  # called before each case: the second grade is (again) running
        if box["proc"].poll() is not None:
            box["proc"] = start()

    time.sleep(5)  # let it get past importing torch
    yield busy
    box["proc"].terminate()
    box["proc"].wait(timeout=60)


@pytest.mark.parametrize("case", TIMING_SENSITIVE)
def test_timing_sensitive_cases_hold_while_a_second_grade_loads_the_machine(tmp_path, case, second_grade):
    """With another grade busy on the same cores, a hang, an output flood and a memory hog still score 0 with
    their own diagnosis, broadcast still gets full marks, and the grade still ends in time."""
    second_grade()
    code, expect = CASES[case]
    results, seconds, _ = _grade(tmp_path, REFERENCE + code, timeout=240)
    _assert_only_the_attack_lost(results, expect)
    assert seconds < 180, f"grading took {seconds:.0f} s under load"
