"""Rank processes forked from one warm process instead of started from scratch (Linux; the parent side is
``Zygote``, the child side this file's ``__main__``).

Why: a rank started as ``python -m tests.harness.worker`` spends ~2 s of CPU importing torch and
torch._dynamo, so a pool of 4 ranks on a 2-core laptop takes ~5 s to start, and every test whose ranks are
killed (a hang, a crash: the harness's own tests, a graded submission) pays it again for
the next pool. The zygote imports those modules once, when the first pool starts, then forks each rank on
request: a rank is ready in tens of milliseconds and runs exactly the code it ran before (``worker.main``).

What makes the fork safe:
- The zygote imports torch and nothing of this repository: it runs as a script, not as ``tests.harness.*``,
  so every module of tests/ and of the implementation under test is imported by the rank after the fork,
  under the rank's own environment (sent with each request) and ``sys.path`` (its ``PYTHONPATH``).
- It runs no torch operation and never touches CUDA: no thread exists to be lost in the fork, and NCCL
  ranks create their CUDA context after it.
- Each rank leads its own session (``setsid``), as a subprocess started with ``start_new_session`` does, so the
  pool's ``killpg`` still ends a rank and everything it started. The zygote dies with the pytest process
  (``PR_SET_PDEATHSIG``), and the ranks die with the zygote.
- The zygote reaps its children and reports each exit status to the parent, so a dead rank is described as
  before ("killed by signal SIGSEGV", "exited with code 0").

Off Linux (macOS forks badly once frameworks are loaded; ``CS336_PLATFORM=macos`` on Linux), or with
``CS336_ZYGOTE=0``, the pool starts its ranks with ``subprocess`` as before. The ``prctl`` calls below run in
the zygote and its forks only, so only on Linux.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ENV_ZYGOTE = "CS336_ZYGOTE"  # "0": start every rank as a fresh process
MAX_MESSAGE = 1 << 20  # one request: argv, environment, working directory


def enabled() -> bool:
    """Linux (``cs336_systems/platform_support.py``: not macOS, nor ``CS336_PLATFORM=macos``) and not
    ``CS336_ZYGOTE=0``. Imported here, in the parent: the zygote process itself imports nothing of the repo."""
    from cs336_systems.platform_support import is_linux

    return is_linux() and os.environ.get(ENV_ZYGOTE, "1") != "0"


class ForkedProcess:
    """The parent's handle of a rank the zygote forked: the part of ``subprocess.Popen`` the pool uses."""

    def __init__(self, zygote: Zygote, pid: int) -> None:
        self.zygote, self.pid, self.returncode = zygote, pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.exit_code(self.pid, timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.zygote.exit_code(self.pid, timeout=timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(f"rank pid {self.pid}", timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)


class Zygote:
    """The parent's side: starts the zygote (a subprocess that imports torch once) and asks it for ranks."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), str(child.fileno())], env=env, cwd=cwd,
            pass_fds=[child.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        child.close()
        self.exits: dict[int, int] = {}  # pid -> exit status (Popen's convention: -N for signal N)
        self._receive("ready", timeout=120)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def spawn(self, argv: list[str], env: dict[str, str], cwd: Path, fd: int) -> ForkedProcess:
        """Fork a rank that runs ``python -m tests.harness.worker *argv`` with ``fd`` (the rank's end of its
        socket to the parent; the string "{fd}" in argv becomes its number in the rank)."""
        request = pickle.dumps({"argv": argv, "env": env, "cwd": str(cwd)})
        socket.send_fds(self.sock, [request], [fd])
        (pid,) = self._receive("forked", timeout=30)
        return ForkedProcess(self, pid)

    def exit_code(self, pid: int, timeout: float | None) -> int | None:
        end = None if timeout is None else time.monotonic() + timeout
        while pid not in self.exits:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return None
            if not self._read(left):
                if not self.alive:  # the zygote is gone, and its ranks with it
                    return self.exits.setdefault(pid, -signal.SIGKILL)
        return self.exits[pid]

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.sock.close()

    def _receive(self, kind: str, timeout: float) -> tuple:
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            message = self._read(left) if left > 0 else None
            if message and message[0] == kind:
                return message[1:]
            if left <= 0 or not self.alive:
                raise RuntimeError(f"the zygote did not answer {kind!r} (exit code {self.proc.poll()})")

    def _read(self, timeout: float | None) -> tuple | None:
        """One message from the zygote within ``timeout`` (exits are recorded on the way), or None."""
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            return None
        data = self.sock.recv(MAX_MESSAGE)
        if not data:
            return None
        message = pickle.loads(data)
        if message[0] == "exit":
            self.exits[message[1]] = message[2]
        return message


_ZYGOTE: Zygote | None = None  # this process's zygote; it dies with the process (PR_SET_PDEATHSIG)


def get_zygote(env: dict[str, str], cwd: Path) -> Zygote | None:
    """This process's zygote, started on first use (and again if it died); None when disabled or broken."""
    global _ZYGOTE
    if not enabled():
        return None
    if _ZYGOTE is None or not _ZYGOTE.alive:
        try:
            _ZYGOTE = Zygote(env, cwd)
        except (OSError, RuntimeError):
            return None
    return _ZYGOTE


# -- the zygote process -------------------------------------------------------------------------------


def _status(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        sock.send(pickle.dumps(("exit", pid, _status(status))))


def _become_rank(sock: socket.socket, request: dict, fd: int) -> None:
    """In the forked child: look like ``python -m tests.harness.worker ...`` started in a new session."""
    sock.close()
    os.setsid()
    try:  # dumpable again, as a freshly started rank is (the zygote is not: _serve)
        import ctypes

        ctypes.CDLL("libc.so.6").prctl(4, 1)
    except (OSError, AttributeError):
        pass
    devnull = os.open(os.devnull, os.O_RDWR)
    for std in (0, 1, 2):
        os.dup2(devnull, std)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [request["cwd"], *extra, *[p for p in sys.path if p not in extra]]
    sys.argv = ["tests.harness.worker", *[str(fd) if a == "{fd}" else a for a in request["argv"]]]
    code = 0
    try:
        from tests.harness import worker

        worker.main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - whatever happens, the child must never return into the zygote's loop
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _serve(fd: int) -> None:
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the pytest process; the ranks die with this one
        # PR_SET_DUMPABLE 0: like the grader's pytest, a rank cannot open this process's
        # /proc memory, environment or descriptors; each rank turns it back on after the fork (_become_rank).
        libc.prctl(4, 0)
    except (OSError, AttributeError):
        pass
    # What every rank imports first (tests/harness/worker.py): paid once here, shared by every fork.
    import torch
    import torch._dynamo  # noqa: F401
    import torch.distributed  # noqa: F401

    del torch
    sock = socket.socket(fileno=fd)
    sock.send(pickle.dumps(("ready",)))
    while True:
        ready, _, _ = select.select([sock], [], [], 0.02)
        _reap(sock)
        if not ready:
            continue
        data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 1)
        if not data:  # the parent closed its end: nothing more to fork
            return
        request = pickle.loads(data)
        pid = os.fork()
        if pid == 0:
            _become_rank(sock, request, fds[0])
        os.close(fds[0])
        sock.send(pickle.dumps(("forked", pid)))


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
