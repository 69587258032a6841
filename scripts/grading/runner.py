"""Run the staff tests on one sandbox and collect every test's outcome, whatever the submission does.

    run = run_tests(settings, staff, submission, files)   # -> RunRecord(items, outcomes, notes)

pytest runs in a child process (its own session) with the grading plugin, which reports over a
signed pipe (see plugin.py). The runner reads only that pipe, never pytest's stdout. Then:
- a test that makes no progress for ``test_timeout`` seconds is stopped (the pytest process and
  everything under it are killed); a pytest process that dies (a submission can kill its parent,
  or exhaust its memory) fails the test it was running. Either way the runner starts a fresh
  pytest on a freshly rebuilt sandbox for the tests not yet reported, so one bad test costs one test;
- this process is a child subreaper: anything a submission starts, even double-forked into a new
  session, is reparented here and killed after every pytest run (frozen first, so it cannot fork);
- the whole grade has a time budget, and each part one of its own (``budget_s`` in the rubric): once a
  part's tests have taken that long, the plugin fails its remaining tests at once; either way tests
  left unrun score 0 with a message saying so. A submission that hangs in every test still finishes.
"""

from __future__ import annotations

import json
import os
import resource
import secrets
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cs336_systems import platform_support
from scripts.grading import channel
from scripts.grading.sandbox import PLUGIN_NAME, StaffFiles, Submission, build_sandbox, kit_of_run
from scripts.grading.staff import STAFF_TESTS
from tests.harness import defaults
from tests.harness.limits import cap, die_with_parent

MAX_RESTARTS = 25
KEEP_LOG = 20000  # characters of pytest's own stdout kept for staff (never shown to students)


@dataclass
class Settings:
    work: Path  # private folder of this grade (sandbox, home, tmp, pytest log)
    backend: str = defaults.DEFAULT_BACKEND
    world_sizes: str = defaults.DEFAULT_WORLD_SIZES
    deadline: float = defaults.DEFAULT_DEADLINE_S  # the harness's per-run_ranks deadline
    test_timeout: float = 240.0  # one test (all its runs) may take this long before it is stopped
    budget: float = 2400.0  # the whole grade
    worker_memory_mb: int = 4096  # address-space cap of each rank (0: none; CUDA needs none)
    worker_log_mb: int = 64  # cap on what each rank may print
    run_as: str | None = None  # run pytest and the ranks as this (unprivileged) user
    python: str | None = None  # their interpreter (default: this one); with run_as, one that user can run
    extra_pytest_args: tuple[str, ...] = ()
    # Per-part time budgets: test file -> part, and part -> seconds its tests may still take (absent: no
    # budget). The grading plugin fails a part's remaining tests at once when its time is spent.
    file_parts: dict[str, str] = field(default_factory=dict)
    part_budgets: dict[str, float] = field(default_factory=dict)
    hung_functions: dict[str, str] = field(default_factory=dict)  # from an earlier run of this grade: refused
    # Called with the run's record after each batch of results (the grade's progress on stderr: progress.py).
    on_progress: Callable[[RunRecord], None] | None = None


@dataclass
class RunRecord:
    items: list[dict] = field(default_factory=list)
    outcomes: dict[str, tuple[str, str]] = field(default_factory=dict)  # nodeid -> (outcome, text)
    notes: list[str] = field(default_factory=list)  # for everyone (the results' top-level output)
    staff_log: str = ""  # pytest's stdout tail and runner events (for graders)
    restarts: int = 0
    spent: dict[str, float] = field(default_factory=dict)  # part -> seconds its tests took (reported durations)
    hung: dict[str, str] = field(default_factory=dict)  # functions that hung (tests/harness/pool.py HUNG_FUNCTIONS)


# -- processes -----------------------------------------------------------------------------------------


def descendants(pid: int | None = None) -> list[int]:
    """Every living process below ``pid`` (default: this one), read by the kit's one process scan (``/proc`` on
    Linux, ``ps`` on macOS)."""
    return platform_support.descendants(pid or os.getpid())


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_descendants() -> int:
    """Kill every process below this one. Returns how many there were."""
    seen: set[int] = set()
    for _ in range(100):
        pids = descendants()
        if not pids:
            break
        seen.update(pids)
        for sig in (signal.SIGSTOP, signal.SIGKILL):  # freeze all first: a fork loop cannot outrun us
            for p in pids:
                try:
                    os.kill(p, sig)
                except (ProcessLookupError, PermissionError):
                    pass
        time.sleep(0.02)
        _reap()
    return len(seen)


# -- the signed channel --------------------------------------------------------------------------------


class ChannelReader:
    """Reads channel.py's lines from the pipe; keeps those that verify and continue the sequence."""

    def __init__(self, fd: int, key: bytes):
        self.fd, self.key, self.buf, self.seq = fd, key, b"", 0
        self.rejected = 0
        self.closed = False

    def read(self, timeout: float) -> list[dict]:
        ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        if not ready:
            return []
        chunk = os.read(self.fd, 1 << 16)
        if not chunk:
            self.closed = True
        self.buf += chunk
        events = []
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            event = channel.decode(self.key, line)
            if event is None or event.get("seq") != self.seq + 1:
                self.rejected += 1
                continue
            self.seq += 1
            events.append(event)
        if len(self.buf) > channel.MAX_LINE:
            self.buf, self.rejected = b"", self.rejected + 1
        return events


# -- one pytest process --------------------------------------------------------------------------------


def _env(settings: Settings, sandbox: Path, hung: dict[str, str]) -> dict[str, str]:
    """The test process's whole environment; ``hung``: functions an earlier run of this grade saw hang."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "HOME": str(settings.work / "home"),
        "TMPDIR": str(settings.work / "tmp"),
        "PYTHONPATH": str(sandbox),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",  # a .pth a rank plants in HOME's user site must not run in a restarted judge
        "PYTHONHASHSEED": "0",
        "OMP_NUM_THREADS": "1",
        "CS336_WORKER_LOG_LIMIT_MB": str(settings.worker_log_mb),
        "CS336_WORKER_MEMORY_LIMIT_MB": str(settings.worker_memory_mb),
        "CS336_FAIL_FAST_HANGS": "1",  # one hanging function costs one deadline (tests/harness/pool.py)
        "CS336_HUNG_FUNCTIONS": json.dumps(hung),  # ... in the whole grade, restarts and hidden run included
    }
    for key, value in os.environ.items():  # what GPU nodes need to find their devices and libraries
        if key.startswith(("CUDA_", "NCCL_", "NVIDIA_")) or key in ("LD_LIBRARY_PATH", "GLOO_SOCKET_IFNAME"):
            env[key] = value
    return env


def _limits(settings: Settings):
    def apply() -> None:
        # The judge process itself: bounded output files and, on CPU, bounded memory (it unpickles replies).
        cap(resource.RLIMIT_FSIZE, max(4 * settings.worker_log_mb, 256) << 20)
        if settings.worker_memory_mb:
            cap(resource.RLIMIT_AS, max(4 * settings.worker_memory_mb, 16384) << 20)
        cap(resource.RLIMIT_CORE, 0)
        die_with_parent()  # a SIGKILLed grader takes pytest along, and pytest its rank workers

    return apply


def _budgets_left(settings: Settings, record: RunRecord) -> str:
    """``--grading-budgets`` for a (re)start: each part's budget less what its tests took so far."""
    left = {p: max(0.0, round(b - record.spent.get(p, 0.0), 1)) for p, b in settings.part_budgets.items()}
    return json.dumps({"files": settings.file_parts, "seconds": left}, separators=(",", ":"))


def _pytest_cmd(settings: Settings, sandbox: Path, selection: list[str], fd: int, key_fd: int,
                budgets: str = "") -> list[str]:  # fmt: skip
    return [
        settings.python or sys.executable, "-m", "pytest", *selection, "-p", PLUGIN_NAME, f"--grading-fd={fd}",
        f"--grading-key-fd={key_fd}",
        "--impl=student", f"--backend={settings.backend}", f"--world-sizes={settings.world_sizes}",
        f"--deadline={settings.deadline}", "-m", "not harness and not staff", "-q", "-rN", "--tb=short",
        "-p", "no:cacheprovider", f"--rootdir={sandbox}", "-c", str(sandbox / "pyproject.toml"),
        "-o", f"timeout={int(settings.test_timeout)}", *((f"--grading-budgets={budgets}",) if budgets else ()),
        *settings.extra_pytest_args,
    ]  # fmt: skip


def check_run_as(settings: Settings, private: tuple[Path, ...] = ()) -> str | None:
    """Why ``settings.run_as`` cannot grade with ``settings.python`` (None if it can): the user must be able
    to start the interpreter and import torch and pytest from it (an interpreter under root's home cannot),
    and must not be able to read any of ``private`` (the staff checkout's reference, rubric and staff tests;
    a batch's other submissions and results)."""
    if not settings.run_as:
        return None
    python = settings.python or sys.executable
    probe = "import os, sys, torch, pytest; print('\\n'.join(p for p in sys.argv[1:] if os.access(p, os.R_OK)))"
    try:
        proc = subprocess.run([python, "-c", probe, *map(str, private)], user=settings.run_as,
                              group=_group_of(settings.run_as), extra_groups=[], capture_output=True, text=True,
                              timeout=120, cwd="/")  # fmt: skip
    except (OSError, KeyError, subprocess.SubprocessError) as exc:
        return f"--run-as {settings.run_as}: cannot run {python} as that user ({exc}); see handouts/grading.md"
    if proc.returncode != 0:
        return (f"--run-as {settings.run_as}: {python} cannot import torch and pytest as that user (give it an "
                f"interpreter it can read: --python, handouts/grading.md):\n{proc.stderr[-1500:]}")  # fmt: skip
    readable = proc.stdout.split()
    if readable:
        return (f"--run-as {settings.run_as}: that user can read {', '.join(readable)}; make them unreadable to "
                "other users first (chmod o-rwx on the staff checkout, the batch folder and its results folder; "
                "handouts/grading.md, Security)")  # fmt: skip
    return None


def _prepare_dirs(settings: Settings, sandbox: Path) -> None:
    for d in ("home", "tmp"):
        (settings.work / d).mkdir(parents=True, exist_ok=True)
    if settings.run_as:
        import pwd

        pw = pwd.getpwnam(settings.run_as)
        # The sandbox stays root's and read-only to the user; only home and tmp are the user's.
        for d in ("home", "tmp"):
            os.chown(settings.work / d, pw.pw_uid, pw.pw_gid)
        for p in [sandbox, *sandbox.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        for folder in (settings.work, settings.work.parent):  # the grade's work dir holds public/ and hidden/
            folder.chmod(0o755)


def _run_once(settings, sandbox, selection, deadline_at, record: RunRecord, current: dict):
    """One pytest process. Returns why it ended: finished, crashed, stalled or budget."""
    key = secrets.token_bytes(32)
    r, w = os.pipe()
    key_r, key_w = os.pipe()
    log_path = settings.work / "pytest.log"
    user_kw = {}
    if settings.run_as:
        user_kw = {"user": settings.run_as, "group": _group_of(settings.run_as), "extra_groups": []}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            _pytest_cmd(settings, sandbox, selection, w, key_r, _budgets_left(settings, record)), cwd=sandbox,
            env=_env(settings, sandbox, {**settings.hung_functions, **record.hung}),
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, pass_fds=[w, key_r],
            start_new_session=True, preexec_fn=_limits(settings), **user_kw,
        )  # fmt: skip
    os.close(w)
    os.close(key_r)
    os.write(key_w, key.hex().encode() + b"\n")  # 65 bytes: fits the pipe buffer, never blocks
    os.close(key_w)
    reader = ChannelReader(r, key)
    last_progress = time.monotonic()
    why = "crashed"
    try:
        while True:
            now = time.monotonic()
            if now >= deadline_at:
                why = "budget"
                break
            if now - last_progress > settings.test_timeout + 30:
                why = "stalled"
                break
            events = reader.read(min(1.0, deadline_at - now))
            for ev in events:
                last_progress = time.monotonic()
                _apply(ev, record, current, settings.file_parts)
                if ev["event"] == "finished":
                    why = "finished"
            if events:
                _report(settings, record)
            if why == "finished" or (reader.closed and proc.poll() is not None):
                break
    finally:
        os.close(r)
        if why == "finished":  # let pytest shut its worker pools down itself
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        code = proc.wait()
        leftover = kill_descendants()
        record.staff_log += f"\n[runner] pytest ended: {why}, exit code {code}, {leftover} leftover processes killed\n"
        if settings.run_as:
            removed = remove_files_of(settings.run_as)
            if removed:
                record.staff_log += f"[runner] removed what {settings.run_as} left in shared folders: {removed}\n"
        record.staff_log += _tail(log_path)
        if reader.rejected:
            record.notes.append(
                f"{reader.rejected} line(s) on the grader's private results channel failed verification and "
                "were ignored (something other than the test runner wrote to it)"
            )
    current["exit"] = code
    return why


SHARED_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm")  # where any user may write


def remove_files_of(user: str, folders: tuple[str, ...] = SHARED_FOLDERS) -> list[str]:
    """Remove what ``user`` owns directly in the world-writable ``folders`` (the one place a submission graded
    with --run-as can still write outside its sandbox), so nothing it planted there outlives its run."""
    import pwd

    uid = pwd.getpwnam(user).pw_uid
    removed = []
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
                removed.append(entry.path)
            except OSError:
                pass
    return removed


def _group_of(user: str) -> int:
    import pwd

    return pwd.getpwnam(user).pw_gid


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - KEEP_LOG))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _apply(ev: dict, record: RunRecord, current: dict, file_parts: dict[str, str]) -> None:
    kind = ev.get("event")
    if kind == "collected" and not record.items:
        record.items = ev["items"]
    elif kind == "collect_error":
        record.notes.append(f"collection error in {ev.get('nodeid')} (a staff problem):\n{ev.get('output', '')}")
    elif kind == "start":
        current["nodeid"], current["since"] = ev["nodeid"], time.monotonic()
    elif kind == "result":
        record.outcomes[ev["nodeid"]] = (ev["outcome"], ev.get("output", ""))
        record.hung.update(ev.get("hung") or {})
        _spend(record, file_parts, ev["nodeid"], float(ev.get("duration", 0.0)))
        current.pop("nodeid", None)


def _spend(record: RunRecord, file_parts: dict[str, str], nodeid: str, seconds: float) -> None:
    part = file_parts.get(nodeid.split("::", 1)[0])
    if part is not None:
        record.spent[part] = record.spent.get(part, 0.0) + max(0.0, seconds)


def run_tests(settings: Settings, staff: StaffFiles, sub: Submission, files: list[str]) -> RunRecord:
    """Run ``files`` (sandbox-relative test files) against the submission; see the module docstring.

    The sandbox holds the kit of the parts graded (``settings.file_parts``: a grade of some parts from the staff
    checkout gets their given code from the reference, sandbox.kit_of_run) and, of the staff-only test files
    (the hidden tests), only those in ``files``."""
    record = RunRecord()
    staff, sub, notes = kit_of_run(staff, sub, set(settings.file_parts.values()))
    staff = staff.only_tests(STAFF_TESTS, files)
    record.notes.extend(notes)
    deadline_at = time.monotonic() + settings.budget
    selection = list(files)
    sandbox = settings.work / "sandbox"
    while True:
        record.notes.extend(n for n in build_sandbox(sandbox, staff, sub) if n not in record.notes)
        _prepare_dirs(settings, sandbox)
        current: dict = {}
        why = _run_once(settings, sandbox, selection, deadline_at, record, current)
        if not record.items:
            record.notes.append(f"the grader could not collect the tests (pytest {why}); see the staff log")
            return record
        stuck = current.get("nodeid")
        if stuck and stuck not in record.outcomes:
            elapsed = time.monotonic() - current.get("since", time.monotonic())
            _spend(record, settings.file_parts, stuck, elapsed)
            record.outcomes[stuck] = ("failed", {
                "stalled": f"stopped: no result after {elapsed:.0f} s (the per-test limit is "
                           f"{settings.test_timeout:.0f} s); the process running it was killed",
                "budget": f"stopped: the grader's time budget ({settings.budget:.0f} s) ran out during this test",
                "crashed": f"the test process died during this test (exit code {current.get('exit')}): the "
                           "submission killed it or exhausted its memory; the remaining tests ran in a fresh one",
            }.get(why, f"ended by {why}"))  # fmt: skip
        remaining = [i["nodeid"] for i in record.items if i["nodeid"] not in record.outcomes]
        if why == "finished" or not remaining:
            break
        if why == "budget" or time.monotonic() >= deadline_at:
            reason = f"not run: the grader's time budget ({settings.budget:.0f} s) ran out"
            record.outcomes.update({n: ("failed", reason) for n in remaining})
            break
        record.restarts += 1
        if record.restarts > MAX_RESTARTS:
            reason = f"not run: the test process died {MAX_RESTARTS} times; the grader gave up"
            record.outcomes.update({n: ("failed", reason) for n in remaining})
            break
        selection = remaining
        _report(settings, record)
    _report(settings, record)
    return record


def _report(settings: Settings, record: RunRecord) -> None:
    """Tell ``settings.on_progress`` where the run is; a failure there is the display's, never the grade's."""
    if settings.on_progress is None:
        return
    try:
        settings.on_progress(record)
    except Exception as exc:  # noqa: BLE001
        settings.on_progress = None
        record.staff_log += f"\n[runner] progress display failed and was turned off: {exc!r}\n"
