"""Grading a crafted submission from a staff test, and the hostile submissions that bundle several attacks.

A grade costs seconds of startup (the grader, pytest, torch in the ranks) before a test runs, so one hostile
submission carries several attacks, each in a different function or caller that exactly one graded test
reaches, and each attack's effect is asserted from that one grade's entry for its test.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tests.harness.pool import ROOT as REPO
from tests.staff.grader import grader_env

REFERENCE = (REPO / "reference_solutions" / "collectives.py").read_text()
ACCOUNTING = (REPO / "reference_solutions" / "accounting.py").read_text()  # part 1's task 1.7 cost model is there
CONTROL = "test_broadcast_copies_src_tensor_to_every_rank"  # untouched in every bundle: must keep full marks
CONTROL_SELECT = "(broadcast_copies_src_tensor_to_every_rank and float32 and first)"


@dataclass
class Graded:
    results: dict
    seconds: float
    proc: subprocess.CompletedProcess
    hunt_found: bool = False  # the "crashes" bundle's hunt left HUNT_FOUND: it ran and found hidden tests
    staff_log: str = ""  # pytest's own output (--staff-log), where asked for

    @property
    def by_name(self) -> dict:
        return {t["name"]: t for t in self.results["tests"]}


def grade(folder: Path, modules: dict[str, str], *, parts: str, select: str | None = None, world_sizes: str = "2",
          deadline: float = 6, test_timeout: float = 40, timeout: float = 120, memory_mb: int | None = 3000,
          extra: tuple[str, ...] = (), shell_prefix: str = "", wait: float = 300) -> Graded:  # fmt: skip
    """Grade ``modules`` (name -> source, placed in ``cs336_systems/``) through ``python -m scripts.grading``.
    ``shell_prefix``: shell commands run before the grader in the same shell (e.g. ``ulimit``)."""
    sub = folder / "submission" / "cs336_systems"
    sub.mkdir(parents=True)
    for name, source in modules.items():
        (sub / f"{name}.py").write_text(source)
    out = folder / "results.json"
    cmd = [sys.executable, "-m", "scripts.grading", str(sub.parent), "--out", str(out), "--parts", parts,
           "--world-sizes", world_sizes, "--deadline", str(deadline), "--test-timeout", str(test_timeout),
           "--timeout", str(timeout), *(("--select", select) if select else ()),
           *(("--memory-mb", str(memory_mb)) if memory_mb else ()), *extra]  # fmt: skip
    env = grader_env()
    env["CS336_FAKE_OUT"] = str(out)  # a submission that finds this path may try to write its own results
    if shell_prefix:
        cmd = ["bash", "-c", f'{shell_prefix} && exec "$@"', "grade", *cmd]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=wait)
    seconds = time.monotonic() - start
    assert out.exists(), f"the grader wrote no results (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    return Graded(json.loads(out.read_text()), seconds, proc)


def leftover_sleepers() -> list[str]:
    """Processes the orphan attack started (``sleep 1000.5``) that are still alive."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "sleep 1000.5" in line]


# -- the attacks ------------------------------------------------------------------------------------------
# Each attack is the body of a function of collectives.py (``tensor``, ``dist`` and ``os`` in scope), the text
# its test's output must show (or one of several), and, for "monkeypatch_torch", code run at import.

ATTACKS: dict[str, tuple[str, str | tuple[str, ...]]] = {
    "infinite_loop": ("while True:\n    pass\n", "hung: no answer within"),
    "deadlock": ("if dist.get_rank() == 0:\n    dist.recv(tensor, src=1)\n", "hung"),
    "os_exit": ("import os\nos._exit(0)\n", "exited with code 0"),
    "segfault": ("import ctypes\nctypes.string_at(0)\n", "SIGSEGV"),
    "fake_summary": (
        "print('=== 99 passed in 0.1s ===')\nprint('{\"score\": 100}')\ntensor.zero_()\n",
        "elements differ",
    ),  # fmt: skip
    "monkeypatch_torch": ("tensor.add_(1)\n", "elements differ"),  # and MONKEYPATCH, at import
    "import_reference": (
        "from reference_solutions.collectives import all_reduce as ar\nar(tensor)\n",
        "not available to submissions",
    ),  # fmt: skip
    "big_output": (
        "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(100):\n    sys.stdout.write(chunk)\n"
        "raise RuntimeError('after 100 MB')\n",
        "File too large",
    ),  # fmt: skip
    # Reaching the cap means writing ~3 GB: on a loaded machine the deadline may come first.
    "memory_hog": (
        "hog = []\nwhile True:\n    hog.append(bytearray(1 << 29))\n",
        ("MemoryError", "hung: no answer within"),
    ),  # fmt: skip
    "orphan_process": (
        "import subprocess\nsubprocess.Popen(['sleep', '1000.5'], start_new_session=True)\n"
        "if os.fork() == 0:\n    os.setsid()\n    os.execvp('sleep', ['sleep', '1000.5'])\n"
        "tensor.zero_()\n",
        "elements differ",
    ),  # fmt: skip
    # The judge is the rank's parent, or the zygote's parent when the rank was forked by one
    # (tests/harness/zygote.py): the pytest process that started the pool.
    "kill_the_judge": (
        "import signal\npid = os.getppid()\n"
        "if b'zygote.py' in open(f'/proc/{pid}/cmdline', 'rb').read():\n"
        "    pid = int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[1])\n"
        "os.kill(pid, signal.SIGKILL)\n",
        "test process died",
    ),  # fmt: skip
    "forged_reply": (
        "import pickle, struct, sys\nfd = int(sys.argv[sys.argv.index('--fd') + 1])\n"
        "class Evil:\n    def __reduce__(self):\n"
        '        return (exec, (\'open("/tmp/cs336-pwned", "w").write("x")\',))\n'
        "data = pickle.dumps({'task': 0, 'status': 'ok', 'value': Evil()})\n"
        "os.write(fd, struct.pack('!i', len(data)) + data)\nimport time\ntime.sleep(60)\n",
        "reply was refused",
    ),  # fmt: skip
    "write_fake_results": (
        "from pathlib import Path\nimport json\n"
        "for p in [Path(os.environ.get('CS336_FAKE_OUT', '/nonexistent')), "
        "Path.cwd() / 'results.json']:\n"
        "    try:\n        p.write_text(json.dumps({'score': 1000, 'tests': []}))\n"
        "    except OSError:\n        pass\n"
        "for t in Path.cwd().glob('tests/*.py'):\n"
        "    t.write_text('def test_fake():\\n    pass\\n')\n"
        "tensor.zero_()\n",
        "elements differ",
    ),  # fmt: skip
}
MONKEYPATCH = (
    "import torch, torch.testing, _pytest.outcomes\ntorch.allclose = lambda *a, **k: True\n"
    "torch.equal = lambda *a, **k: True\ntorch.isclose = lambda a, b, **k: torch.ones_like(a, dtype=torch.bool)\n"
    "torch.testing.assert_close = lambda *a, **k: None\ndist.all_reduce = lambda *a, **k: None\n"
    "_pytest.outcomes.fail = lambda *a, **k: None\n"
)

# Where an attack can sit: (graded test, -k expression for one case of it at world size 2, the function's
# signature, the caller test it dispatches on for all_reduce). Each slot is reached by its test alone.
SLOTS = {
    "reduce": ("test_reduce_sums_into_dst_and_leaves_others_unchanged",
               "(reduce_sums_into_dst_and_leaves_others_unchanged and float32 and first)"),
    "all_gather": ("test_all_gather_concatenates_in_rank_order", "(all_gather_concatenates_in_rank_order and float32)"),
    "reduce_scatter": ("test_reduce_scatter_returns_this_ranks_chunk_of_the_sum",
                       "(reduce_scatter_returns_this_ranks_chunk_of_the_sum and float32)"),
    "all_to_all": ("test_all_to_all_delivers_uneven_pieces", "(all_to_all_delivers_uneven_pieces and float32)"),
    "all_reduce_sum": ("test_all_reduce_sums_in_place_on_every_rank",
                       "(all_reduce_sums_in_place_on_every_rank and float32)"),
    "all_reduce_avg": ("test_all_reduce_avg_divides_by_world_size_once",
                       "(all_reduce_avg_divides_by_world_size_once and float32)"),
    "all_reduce_random": ("test_all_reduce_random_floats_match_the_sum",
                          "(all_reduce_random_floats_match_the_sum and contiguous)"),
}  # fmt: skip
SIGNATURES = {
    "reduce": "def reduce(tensor, dst, group=None):",
    "all_gather": "def all_gather(tensor, group=None):",
    "reduce_scatter": "def reduce_scatter(tensor, group=None):",
    "all_to_all": "def all_to_all(tensors, group=None):\n    tensor = tensors[0] if tensors else None",
}
ALL_REDUCE_CALLERS = {  # slot -> the condition on all_reduce's caller (the rank function) and arguments
    "all_reduce_sum": "_caller == 'collective_rank' and op == 'sum'",
    "all_reduce_avg": "_caller == 'collective_rank' and op == 'avg'",
    "all_reduce_random": "_caller == 'all_reduce_random_rank'",
}

# The hunt for hidden tests (test_exfiltration.py) rides in the "crashes" bundle as its broadcast, the
# control: public tests run in a sandbox without hidden files, so it finds nothing and passes there; the
# hidden test that calls it after a reference all_reduce (back_to_back_rank, not a slot of all_reduce) is
# graded too, in the hidden run's own sandbox, where it finds the files, raises their text and leaves
# HUNT_FOUND. The planted broadcast searches, from inside a rank, the sandbox and its parent folders (the
# grade's work dir), HOME, TMPDIR, /tmp and every sys.path entry for hidden test files, and sys.modules.
HUNT = """
HUNT_FOUND = "@HUNT_FOUND@"


_reference_broadcast = broadcast


def broadcast(tensor, src=0, group=None):
    import os
    import sys

    here = os.getcwd()
    roots = {here, os.path.dirname(here), os.path.dirname(os.path.dirname(here)), os.environ.get("HOME", ""),
             os.environ.get("TMPDIR", ""), "/tmp", *sys.path}
    loot = []
    for root in filter(None, roots):
        for dirpath, dirs, files in os.walk(root):
            if dirpath.count(os.sep) - root.count(os.sep) >= (1 if root == "/tmp" else 6):
                dirs[:] = []
            for name in files:
                if name.endswith(".py") and "hidden" in name:
                    try:
                        loot.append(open(os.path.join(dirpath, name)).read())
                    except OSError:
                        pass
    loot += [repr(vars(m).get("__doc__")) for n, m in list(sys.modules.items()) if "hidden" in n]
    if loot:
        open(HUNT_FOUND, "w").write("found")  # the test's proof that the hunt ran and found something
        print("LOOT:", *loot)
        raise ValueError("LOOT: " + "\\n".join(loot)[:20000])
    return _reference_broadcast(tensor, src, group)
"""
HUNT_FOUND = Path(f"/tmp/cs336-hunt-found-{os.getpid()}")  # written by the hunt when it finds loot
HIDDEN_TEST = "test_back_to_back_collectives_on_odd_world_sizes (hidden test)"  # the hunt's, in "crashes"

# The "timing" bundle also carries part 2's deadlocked method (test_grade.py): a DDP class whose method hangs
# (rank 0 waits in a barrier the others never join), graded on two cases of it and two of another class.
DDP_REFERENCE = (REPO / "reference_solutions" / "ddp.py").read_text()
WAIT_FOR_ALL_REDUCES = """        for work, p in self._pending:
            work.wait()
            p.grad.div_(self.world_size)
"""
DEADLOCKED_METHOD = "        if dist.get_rank() == 0:\n            dist.barrier()\n"
DDP_SELECT = "(sgd_steps_match and (individual or bucketed-inf) and (toy or tied))"
DDP_TEST = "test_sgd_steps_match_one_process_on_the_whole_batch"

# Two bundles: each slot at most once per bundle, and at most one hang per function (a function that hung
# is not run again in the grade). Bundle "timing" holds the cases whose outcome depends on time; it is also
# graded while a second grade loads the machine.
BUNDLES: dict[str, dict[str, str]] = {  # bundle -> attack -> slot
    "timing": {"deadlock": "reduce", "infinite_loop": "all_gather", "memory_hog": "reduce_scatter",
               "forged_reply": "all_to_all", "big_output": "all_reduce_sum", "fake_summary": "all_reduce_avg",
               "orphan_process": "all_reduce_random"},
    "crashes": {"os_exit": "reduce", "segfault": "all_gather", "import_reference": "reduce_scatter",
                "kill_the_judge": "all_to_all", "monkeypatch_torch": "all_reduce_sum",
                "write_fake_results": "all_reduce_avg"},
}  # fmt: skip
TIMING_SENSITIVE = ["infinite_loop", "deadlock", "big_output", "memory_hog"]
BUNDLE_OF = {attack: bundle for bundle, attacks in BUNDLES.items() for attack in attacks}


def _indent(code: str, by: int) -> str:
    return textwrap.indent(code, " " * by)


def hostile_source(bundle: str) -> str:
    """The reference collectives.py with each attack of ``bundle`` planted in its slot."""
    attacks = BUNDLES[bundle]
    code = [REFERENCE, "\nimport os\n\n_reference_all_reduce = all_reduce\n"]
    if bundle == "crashes":
        code.append(HUNT.replace("@HUNT_FOUND@", str(HUNT_FOUND)))
    if "monkeypatch_torch" in attacks:
        code.append(MONKEYPATCH)
    branches = []
    for attack, slot in attacks.items():
        body = ATTACKS[attack][0]
        if slot in SIGNATURES:
            code.append(f"\n\n{SIGNATURES[slot]}\n{_indent(body, 4)}")
        else:
            branches.append(f"    if {ALL_REDUCE_CALLERS[slot]}:\n{_indent(body, 8)}        return\n")
    code.append(
        "\n\ndef all_reduce(tensor, op='sum', group=None, *, algorithm='auto'):\n"
        "    import sys\n\n    _caller = sys._getframe(1).f_code.co_name\n" + "".join(branches)
        + "    return _reference_all_reduce(tensor, op, group, algorithm=algorithm)\n"
    )  # fmt: skip
    return "".join(code)


@contextlib.contextmanager
def second_grade_running(folder: Path):
    """A grade of the reference's part 1 (world sizes 2 and 4) running beside the block, restarted (by a
    thread) whenever it ends, so both cores stay busy the whole time."""
    sub = folder / "submission" / "cs336_systems"
    sub.mkdir(parents=True)
    (sub / "collectives.py").write_text(REFERENCE)
    cmd = [sys.executable, "-m", "scripts.grading", str(sub.parent), "--out", str(folder / "results.json"),
           "--parts", "collectives", "--world-sizes", "2,4"]  # fmt: skip
    env = grader_env()
    stop = threading.Event()
    box: dict[str, subprocess.Popen] = {}

    def keep_busy() -> None:
        while not stop.is_set():
            box["proc"] = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL)  # fmt: skip
            while box["proc"].poll() is None and not stop.wait(0.5):
                pass

    thread = threading.Thread(target=keep_busy, daemon=True)
    thread.start()
    time.sleep(5)  # let it get past importing torch
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)
        box["proc"].terminate()
        box["proc"].wait(timeout=60)


def grade_bundle(folder: Path, bundle: str, wait: float = 300) -> Graded:
    """One grade of ``bundle``'s hostile submission: part 1 at world size 2, one case of each of its tests."""
    HUNT_FOUND.unlink(missing_ok=True)
    modules, extra = {"collectives": hostile_source(bundle)}, ()
    if bundle == "timing":
        assert DDP_REFERENCE.count(WAIT_FOR_ALL_REDUCES) == 1
        modules["ddp"] = DDP_REFERENCE.replace(WAIT_FOR_ALL_REDUCES, DEADLOCKED_METHOD + WAIT_FOR_ALL_REDUCES)
        # pytest's own output: every case's failure (an entry's output shows its first)
        extra = ("--staff-log", str(folder / "staff.log"))
    # Nothing in "crashes" hangs: a long deadline costs nothing there and gives the hunt (which walks every
    # sys.path entry, the venv's site-packages included) time on a loaded machine.
    deadline, test_timeout = (6, 40) if bundle == "timing" else (60, 120)
    # The hunt's test runs at odd world sizes only, and the grader's device-faithful run stands for a node of
    # max(--world-sizes) GPUs: "crashes" grades at 2 and 3, keeping one world-size-2 case of every other test.
    world_sizes, select = "2", bundle_select(bundle)
    if bundle == "crashes":
        world_sizes, select = "2,3", f"({select}) and (w2 or back_to_back)"
    graded = grade(folder, modules, parts=",".join(modules), deadline=deadline, test_timeout=test_timeout,
                   world_sizes=world_sizes, select=select, extra=extra, wait=wait)  # fmt: skip
    graded.staff_log = (folder / "staff.log").read_text() if extra else ""
    graded.hunt_found = HUNT_FOUND.exists()
    HUNT_FOUND.unlink(missing_ok=True)
    return graded


def bundle_select(bundle: str) -> str:
    more = {"crashes": ["back_to_back_collectives_on_odd_world_sizes"], "timing": [DDP_SELECT]}[bundle]
    return " or ".join([CONTROL_SELECT, *(SLOTS[slot][1] for slot in BUNDLES[bundle].values()), *more])


def attacked_test(attack: str) -> str:
    return SLOTS[BUNDLES[BUNDLE_OF[attack]][attack]][0]
