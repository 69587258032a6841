"""Parent side of the harness: pools of rank processes reused across tests, with a deadline.

Design (why it is not ``mp.spawn`` per test):
- One pool per (world size, backend), started on first use and kept for the whole session, so a
  test costs a few milliseconds instead of ~3 s for new processes importing torch.
- The default process group is kept between tests too (joining a new one costs ~30 ms), as long
  as the previous test left it healthy: every rank answered ``ok`` and kept the group as it
  found it (not destroyed, replaced or given subgroups). After anything else (a rank that
  raised, hung or died, a changed group) every rank joins a fresh group under a new
  ``PrefixStore``, so messages a failed test left in flight can never reach the next one.
  The trade-off: a test that *passes* yet leaves a message in flight (an ``isend`` nobody
  receives, an un-awaited collective) could feed it to the next test. Passing code leaves
  nothing in flight in practice, because every collective and every send it makes is matched
  on the peer; a test that wants a clean group whatever came before can destroy it, and
  ``CS336_FRESH_GROUPS=1`` gives every test a fresh group (the old, ~30 ms slower behaviour).
- Ranks are forked from a zygote that imported torch once (tests/harness/zygote.py, Linux): a new pool,
  after a test killed the last one, is ready in tens of milliseconds instead of seconds. On macOS (and with
  ``CS336_PLATFORM=macos``) each rank is a fresh ``python -m tests.harness.worker``: ~2 s of CPU per rank
  to import torch when a pool starts; a test on a running pool costs the same either way.
- gloo talks over the interface ``cs336_systems/platform_support.py`` picks (the student's
  ``GLOO_SOCKET_IFNAME``, else the loopback it finds). When gloo cannot use it, every test fails with the
  same one line that says the fix (``GLOO_PROBLEM``), not a C++ enforce message per rank per test.
- Rendezvous goes through a ``FileStore`` in a private temporary folder: no fixed port, so two
  suites (or two graded submissions) can run side by side on one machine.
- Every test has a deadline. When it passes, or when one rank failed and the others did not
  follow within a short grace period, the parent sends SIGUSR1 (faulthandler prints every live
  rank's Python stack), kills the pool and reports: the next test gets a fresh pool.
- A rank that dies (``os._exit``, a segfault) closes its socket; the parent sees EOF at once.
- The parent only receives values; every assertion and every oracle lives in the test itself.
"""

from __future__ import annotations

import ast
import atexit
import json
import os
import pickle
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path

from cs336_systems import platform_support
from tests.harness.defaults import env_device_faithful, env_fresh_groups, env_p2p_matching
from tests.harness.protocol import Status
from tests.harness.replies import RefusedReply, load_reply
from tests.harness.zygote import ForkedProcess, get_zygote

ROOT = Path(__file__).resolve().parents[2]
# Under the grader (CS336_FAIL_FAST_HANGS=1), a hang costs one deadline, not one per case, so a submission
# with a deadlocked function still grades within the time limit: the implementation's functions the hung
# ranks were in are watched from then on (HUNG_FUNCTIONS, below); a hang outside them (no frame of the
# implementation) makes that rank function's later cases fail at once with the same diagnosis.
FAIL_FAST_HANGS = os.environ.get("CS336_FAIL_FAST_HANGS") == "1"
HUNG_BEFORE: dict[str, str] = {}  # rank function's module.qualname -> the report of the case that hung
# Likewise, once importing an implementation module ends a rank process (os._exit or a crash at import),
# later tests that load it fail at once instead of paying a new pool each (tests/harness/context.py).
UNIMPORTABLE: set[str] = set()
# And once a case hangs inside a function or method of the implementation (the outermost frame of the
# student's package in a hung rank's stack, e.g. ``cs336_systems.collectives.broadcast``), later calls of
# it raise at once in the ranks instead of running (context.py): every test that needs it costs nothing,
# not a deadline and a new pool each; the tests that do not call it are graded as usual.
# The grader hands on what an earlier pytest run of the same grade found (a restart, the hidden run).
HUNG_FUNCTIONS: dict[str, str] = json.loads(os.environ.get("CS336_HUNG_FUNCTIONS") or "{}") if FAIL_FAST_HANGS else {}
# ^ "<impl>.<module>.<qualname>" -> the test (node id) it hung in
STARTUP_TIMEOUT_S = 120.0  # importing torch on 8 ranks of a loaded 2-core machine is slow
ERROR_GRACE_S = 2.0  # after one rank fails, how long the others get to fail too
STACK_WAIT_S = 0.5  # how long faulthandler gets to write the stacks after SIGUSR1
TAIL_CHARS = 4000  # how much of a rank's log and stack dump goes into a failure message
# Why gloo cannot start here (one line with the fix), once a pool found out: later tests fail at once with it.
GLOO_PROBLEM: str | None = None


class RankFailure(AssertionError):
    """A distributed run did not complete on every rank; the message says what each rank did."""


class GlooUnavailable(RankFailure):
    """gloo cannot use this machine's network interface: no test can run until the student fixes it."""


@dataclass
class _Rank:
    rank: int
    proc: subprocess.Popen | ForkedProcess
    conn: Connection
    log: Path
    stacks: Path


@dataclass
class WorkerPool:
    world_size: int
    backend: str
    tmp: Path = field(init=False)
    env: dict[str, str] = field(init=False, repr=False)  # the ranks' environment
    ranks: list[_Rank] = field(init=False, default_factory=list)
    tasks_run: int = 0
    fresh_group: bool = True  # the next task gets a new default process group (see the module docstring)
    always_fresh: bool = field(default_factory=env_fresh_groups)  # CS336_FRESH_GROUPS=1: never keep a group

    def __post_init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix=f"cs336-pool-w{self.world_size}-"))
        env = dict(os.environ)
        # The ranks can import whatever this process can (the implementation under test, tests.*).
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *[p for p in sys.path if p]])
        try:  # single node: the loopback, never an external interface (and never a slow host-name lookup)
            platform_support.use_gloo_interface(env)
        except platform_support.GlooInterfaceError as exc:
            shutil.rmtree(self.tmp, ignore_errors=True)
            _gloo_unavailable(str(exc))
        self.env = env
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("PYTHONFAULTHANDLER", "1")
        env["CS336_IMPORT_MARKERS"] = str(self.tmp)  # RankContext.load marks the import it is in
        zygote = get_zygote(env, ROOT)  # forks warm ranks (tests/harness/zygote.py); None: start them fresh
        for r in range(self.world_size):
            parent_sock, child_sock = socket.socketpair()
            log, stacks = self.tmp / f"rank{r}.log", self.tmp / f"rank{r}.stacks"
            args = [
                "--rank", str(r), "--world-size", str(self.world_size), "--fd", "{fd}",
                "--store", str(self.tmp / "store"), "--log", str(log), "--stacks", str(stacks),
            ]  # fmt: skip
            if zygote is not None:
                proc = zygote.spawn(args, env, ROOT, child_sock.fileno())
            else:
                cmd = [sys.executable, "-m", "tests.harness.worker", *args]
                cmd[cmd.index("{fd}")] = str(child_sock.fileno())
                proc = subprocess.Popen(
                    cmd, env=env, cwd=ROOT, pass_fds=[child_sock.fileno()], start_new_session=True,
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
            child_sock.close()
            self.ranks.append(_Rank(r, proc, Connection(parent_sock.detach()), log, stacks))
        replies = self._collect(list(range(self.world_size)), STARTUP_TIMEOUT_S, task=None)
        bad = {r: v for r, v in replies.items() if v["status"] != Status.READY}
        if bad:
            report = self._report(bad, "the worker pool did not start")
            self.close()
            raise RankFailure(report)

    # -- running one task ---------------------------------------------------------------------

    def run(self, fn, args, kwargs, *, impl: str, deadline: float) -> list:
        __tracebackhide__ = True  # the failure message says everything; pool internals are noise
        name = f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', fn)}"
        if name in HUNG_BEFORE:  # the grader's time bound: one hang costs one deadline, not one per case
            raise RankFailure(
                f"{getattr(fn, '__name__', fn)} not run again: an earlier case of it hung, and it would wait out "
                f"the deadline again. The earlier case's diagnosis:\n{HUNG_BEFORE[name]}"
            )
        self.tasks_run += 1
        task = self.tasks_run
        msg = {"task": task, "fn": fn, "args": args, "kwargs": kwargs, "impl": impl,
               "backend": self.backend, "fresh_group": self.fresh_group,
               "unimportable": sorted(UNIMPORTABLE), "hung_functions": dict(HUNG_FUNCTIONS),
               "device_faithful": env_device_faithful(), "p2p_matching": env_p2p_matching()}  # fmt: skip
        try:
            payload = pickle.dumps(msg)
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            raise TypeError(
                f"cannot send {getattr(fn, '__qualname__', fn)!r} to the ranks ({exc}); rank functions "
                "must be module-level functions and their arguments picklable"
            ) from exc
        for r in self.ranks:
            r.conn.send_bytes(payload)
        replies = self._collect(list(range(self.world_size)), deadline, task=task)
        healthy = all(v["status"] == Status.OK and v.get("group_kept") is True for v in replies.values())
        self.fresh_group = self.always_fresh or not healthy
        if any(v["status"] != Status.OK for v in replies.values()):
            if self.backend == "gloo":
                self._check_gloo_started(replies)
            report = self._report(replies, f"{getattr(fn, '__name__', fn)} failed")
            if FAIL_FAST_HANGS:
                report += self._note_fatal_imports(replies)  # before close(): it removes the markers
            if any(v["status"] in (Status.HUNG, Status.DIED) for v in replies.values()):
                self.close()  # a rank is stuck or gone: the next test gets a fresh pool
            if FAIL_FAST_HANGS and any(v["status"] == Status.HUNG for v in replies.values()):
                stuck_in = {f for v in replies.values() for f in _hung_in(v.get("stacks", ""), impl)}
                test = os.environ.get("PYTEST_CURRENT_TEST", getattr(fn, "__name__", str(fn))).split(" ")[0]
                for function in stuck_in:  # from now on they raise at once, wherever they are called from
                    HUNG_FUNCTIONS.setdefault(function, test)
                if not stuck_in:  # hung outside the implementation's functions: skip this rank function
                    HUNG_BEFORE[name] = report
            raise RankFailure(report)
        return [replies[r]["value"] for r in range(self.world_size)]

    def _check_gloo_started(self, replies: dict[int, dict]) -> None:
        """gloo failed to use its interface (its enforce message, on every rank): one line for this test and
        every later one, instead of the same C++ message per rank per test."""
        __tracebackhide__ = True
        for v in replies.values():
            problem = platform_support.gloo_failure(f"{v.get('error', '')}\n{v.get('traceback', '')}", self.env)
            if problem:
                self.close()
                _gloo_unavailable(problem)

    def _note_fatal_imports(self, replies: dict[int, dict]) -> str:
        """Modules a rank died importing (its marker is still there): remembered, and said in the report."""
        found = set()
        for r, v in replies.items():
            marker = self.tmp / f"rank{r}"
            if v["status"] == Status.DIED and marker.exists():
                found.add(marker.read_text())
        UNIMPORTABLE.update(found)
        return "".join(f"\n(the rank died while importing {m}: later tests that need it fail at once)" for m in found)

    def _collect(self, pending: list[int], deadline: float, task) -> dict[int, dict]:
        """Wait for one reply per rank; a rank that does not answer in time is marked hung."""
        replies: dict[int, dict] = {}
        end = time.monotonic() + deadline
        by_conn = {self.ranks[r].conn: r for r in pending}
        while by_conn:
            now = time.monotonic()
            if not all(v["status"].finished for v in replies.values()):
                end = min(end, now + ERROR_GRACE_S)
            ready = wait(list(by_conn), timeout=max(0.0, end - now))
            if not ready:
                break
            for conn in ready:
                r = by_conn.pop(conn)
                replies[r] = self._receive(r, task)
        if by_conn:
            hung = sorted(by_conn.values())
            stacks = self._dump_stacks(hung)
            waited = (
                f"{deadline:.0f} s deadline"
                if all(v["status"].finished for v in replies.values())
                else f"{ERROR_GRACE_S:.0f} s after another rank failed"
            )
            for r in hung:
                replies[r] = {"status": Status.HUNG, "error": f"no answer within the {waited}", "stacks": stacks[r]}
        return replies

    def _receive(self, r: int, task) -> dict:
        rank = self.ranks[r]
        try:
            reply = load_reply(rank.conn.recv_bytes())
            if not isinstance(reply, dict) or not isinstance(reply.get("status"), str):
                raise RefusedReply(f"a reply that is not a status dict: {type(reply).__name__}")
            reply["status"] = Status(reply["status"])  # ValueError for a status no worker sends
        except (RefusedReply, pickle.UnpicklingError, ValueError, TypeError, AttributeError) as exc:
            # The rank is not to be trusted any more: DIED ends the pool after this test.
            return {"status": Status.DIED, "error": f"its reply was refused: {exc}"[:1000]}
        except (EOFError, OSError):
            try:
                code = rank.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
            how = (
                f"killed by signal {signal.Signals(-code).name}" if code is not None and code < 0
                else f"exited with code {code}"
            )  # fmt: skip
            return {"status": Status.DIED, "error": f"the rank process {how}", "stacks": _tail(rank.stacks)}
        if reply["status"] == Status.READY or reply.get("task") == task:
            return reply
        if reply.get("task") is None and reply["status"] == Status.ERROR:  # the task could not even be unpickled
            return reply
        return {"status": Status.ERROR, "error": f"protocol error: reply for task {reply.get('task')}, expected {task}"}

    def _dump_stacks(self, ranks: list[int]) -> dict[int, str]:
        for r in ranks:
            try:
                self.ranks[r].proc.send_signal(signal.SIGUSR1)
            except ProcessLookupError:
                pass
        time.sleep(STACK_WAIT_S)
        return {r: _tail(self.ranks[r].stacks) for r in ranks}

    def _report(self, replies: dict[int, dict], headline: str) -> str:
        lines = [f"{headline} (world size {self.world_size}, backend {self.backend}):"]
        for r in sorted(replies):
            v = replies[r]
            status = v["status"]
            if status.finished:
                lines.append(f"--- rank {r}: finished")
                continue
            lines.append(f"--- rank {r}: {status}: {v.get('error', '')}")
            same = [q for q in sorted(replies) if q < r and replies[q].get("traceback") == v.get("traceback")]
            if v.get("traceback") and same:
                lines.append(f"(same traceback as rank {same[0]})")
            elif v.get("traceback"):
                lines.append(_strip_harness_frames(v["traceback"]).rstrip())
            if v.get("stacks"):
                lines.append(f"Python stack of rank {r}:\n{v['stacks'].rstrip()}")
            log = _tail(self.ranks[r].log)
            if log.strip():
                lines.append(f"rank {r} printed:\n{log.rstrip()}")
        return "\n".join(lines)

    # -- lifetime -----------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return bool(self.ranks) and all(r.proc.poll() is None for r in self.ranks)

    def close(self) -> None:
        """Kill every rank and everything it started: its process group (each rank leads its own session),
        and every descendant found before that, even one that left the group (``setsid``, a new session):
        once the rank is dead its orphans would be re-parented out of reach."""
        for r in self.ranks:
            descendants = _descendants(r.proc.pid)
            try:
                os.killpg(r.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            for pid in descendants:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        for r in self.ranks:
            try:
                r.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            r.conn.close()
        self.ranks = []
        shutil.rmtree(self.tmp, ignore_errors=True)


def _descendants(pid: int) -> list[int]:
    """Every living descendant of ``pid`` (children first): /proc's parent links on Linux, ``ps`` on macOS."""
    return platform_support.descendants(pid)


def _gloo_unavailable(problem: str):
    __tracebackhide__ = True
    global GLOO_PROBLEM
    GLOO_PROBLEM = problem
    raise GlooUnavailable(problem)


def _hung_in(stacks: str, impl: str) -> set[str]:
    """The implementation's outermost function in each thread of a faulthandler dump: the public function or
    method the test called (``<impl>.<module>.<qualname>``, e.g. ``...ddp.DDP.forward``), not the helper it
    was stuck in."""
    found = set()
    folder = "/" + impl.replace(".", "/") + "/"
    for thread in re.split(r"\n(?=(?:Current thread|Thread) 0x)", stacks):
        frames = re.findall(r'File "([^"]+)", line (\d+) in (\w+)', thread)  # most recent call first
        mine = [(path, int(line), fn) for path, line, fn in frames if folder in path and path.endswith(".py")]
        if mine:
            path, line, fn = mine[-1]
            module = path.rsplit(folder, 1)[1].removesuffix(".py").replace("/", ".")
            found.add(f"{impl}.{module}.{_qualname(path, line, fn, folder)}")
    return found


def _qualname(path: str, line: int, name: str, folder: str) -> str:
    """``Class.method`` when line ``line`` of ``path`` is in method ``name`` of a top-level class, else ``name``
    (faulthandler names a frame's function only). The source is parsed, never run; a rank writes the stack
    dump, so only a real file of the implementation's package is read (no "..", no link out of it)."""
    if ".." in Path(path).parts or folder not in str(Path(path).resolve()):
        return name
    try:
        tree = ast.parse(Path(path).read_text(errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return name
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.lineno <= line <= (node.end_lineno or node.lineno):
            for item in node.body:
                inside = item.lineno <= line <= (item.end_lineno or item.lineno)
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == name and inside:
                    return f"{node.name}.{name}"
    return name


def _tail(path: Path) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text if len(text) <= TAIL_CHARS else "...\n" + text[-TAIL_CHARS:]


def _strip_harness_frames(tb: str) -> str:
    """Drop the worker's own frames so the traceback starts in the test's rank function."""
    blocks = tb.split('  File "')
    keep = [b for b in blocks[1:] if "tests/harness/worker.py" not in b.split("\n", 1)[0]]
    return blocks[0] + "".join('  File "' + b for b in keep)


_POOLS: dict[tuple[int, str], WorkerPool] = {}
KEEP_POOLS = False  # True: a pytest session's end leaves the pools running for the next one in this process


def get_pool(world_size: int, backend: str) -> WorkerPool:
    __tracebackhide__ = True
    if GLOO_PROBLEM is not None:
        raise GlooUnavailable(GLOO_PROBLEM)
    pool = _POOLS.get((world_size, backend))
    if pool is None or not pool.alive:
        if pool is not None:
            pool.close()
        pool = _POOLS[(world_size, backend)] = WorkerPool(world_size, backend)
    return pool


@atexit.register
def shutdown_pools() -> None:
    for pool in _POOLS.values():
        pool.close()
    _POOLS.clear()
