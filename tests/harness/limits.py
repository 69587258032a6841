"""Process limits and Linux process flags, in one place for the rank workers and the grader.

    from tests.harness.limits import cap, die_with_parent
    cap(resource.RLIMIT_AS, 8 << 30)   # never above the inherited hard limit; says so when it must clamp
    die_with_parent()                  # SIGKILL when the parent dies: no rank outlives a killed pytest

Every ``setrlimit`` in the kit goes through ``cap``: asking for more than the inherited hard limit
raises ``ValueError`` in ``setrlimit``, so a host started under ``ulimit -v 12G`` would otherwise
fail every run. The prctl helpers are no-ops off Linux (``cs336_systems/platform_support.py``, which
``CS336_PLATFORM=macos`` forces onto its macOS branch): they return False. macOS accepts ``RLIMIT_AS`` but does
not enforce it, so there a rank's memory cap (the grader's, on Linux) is not set at all.
"""

from __future__ import annotations

import ctypes
import resource
import signal
import sys

from cs336_systems.platform_support import is_linux

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 1, 4, 36


def cap(which: int, wanted: int, *, log=None) -> int:
    """Set both limits of ``which`` to ``min(wanted, inherited hard limit)``; returns the value set.

    ``log`` (a callable taking one string, default stderr) hears about it when the hard limit won.
    ``RLIMIT_AS`` off Linux: not set (macOS does not enforce it); returns ``wanted``.
    """
    if which == resource.RLIMIT_AS and not is_linux():
        return wanted
    _, hard = resource.getrlimit(which)
    value = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if value != wanted:
        (log or (lambda msg: print(msg, file=sys.stderr)))(
            f"limit {_name(which)}: wanted {wanted}, the inherited hard limit is {hard}; using {value}"
        )
    resource.setrlimit(which, (value, value))
    return value


def _name(which: int) -> str:
    return next((n for n in dir(resource) if n.startswith("RLIMIT_") and getattr(resource, n) == which), str(which))


def _prctl(option: int, arg: int) -> bool:
    if not is_linux():
        return False
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl(option, arg) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """This process gets ``sig`` (default SIGKILL) when its parent dies (Linux)."""
    return _prctl(PR_SET_PDEATHSIG, sig)


def make_undumpable() -> bool:
    """Other processes of the same user can no longer read this one's memory through /proc or ptrace."""
    return _prctl(PR_SET_DUMPABLE, 0)


def become_subreaper() -> bool:
    """Orphaned descendants are re-parented to this process, so it can find and end them all."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)
