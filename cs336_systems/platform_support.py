"""Given helper (not a task): what differs between Linux and macOS when the kit starts ranks, in one place.

Every place that starts ranks (the test harness, ``launcher.launch``, the benchmarks and the train tool) asks
this module three things; nothing else in the kit tests ``sys.platform`` or names an interface:

  ``gloo_interface()``  the network interface gloo's ranks talk over: the student's ``GLOO_SOCKET_IFNAME`` when
      set (checked to exist), else the machine's loopback, looked up (``lo`` on Linux and WSL2, ``lo0`` on
      macOS). Single-node ranks must never pick an external interface, and leaving the variable unset is no
      cure: gloo then resolves the host name, which on macOS can take seconds per lookup or pick a Wi-Fi
      address. A name the machine lacks raises ``GlooInterfaceError`` with one line that says the fix,
      where gloo would print a C++ enforce failure on every rank.
  ``start_method()``  how a process starts ranks it runs in Python: ``fork`` on Linux (cheap, torch is already
      imported), ``spawn`` on macOS (which forks badly once system frameworks are loaded).
  ``is_linux()``  whether the Linux-only calls run: ``prctl`` and ``tgkill`` through the C library, the
      ``/proc`` scans (``process_parents`` has a ``ps`` branch), the zygote of tests/harness/zygote.py.

``CS336_PLATFORM=macos`` makes a Linux machine take every macOS branch (CI runs the tests so; the unit tests
are tests/test_harness_platform.py); ``CS336_PLATFORM=linux`` the Linux ones. Unset: the machine's own.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

ENV_PLATFORM = "CS336_PLATFORM"  # "linux" or "macos": take that platform's branches whatever the machine
ENV_IFNAME = "GLOO_SOCKET_IFNAME"  # gloo's own variable: one interface name, or several separated by commas
PLATFORMS = ("linux", "macos")
# The loopback's name, most likely first: Linux and WSL2 call it lo, macOS and the BSDs lo0.
LOOPBACK_NAMES = {"linux": ("lo", "lo0"), "macos": ("lo0", "lo")}


class GlooInterfaceError(RuntimeError):
    """gloo cannot start on this machine's interfaces; the message is one line that says the fix."""


def platform() -> str:
    """``"linux"`` or ``"macos"``: ``CS336_PLATFORM`` when set, else the machine's (WSL2 is Linux). Another system
    (native Windows) takes the macOS branches: no ``prctl``, no ``/proc``, no fork."""
    forced = os.environ.get(ENV_PLATFORM, "")
    if forced:
        if forced not in PLATFORMS:
            raise ValueError(f"{ENV_PLATFORM}={forced!r}: use one of {', '.join(PLATFORMS)}, or unset it")
        return forced
    return "linux" if sys.platform.startswith("linux") else "macos"


def is_linux() -> bool:
    """Whether the Linux-only calls run (``prctl``, ``tgkill``, ``/proc``, the zygote's fork)."""
    return platform() == "linux"


def start_method() -> str:
    """The ``multiprocessing`` start method for ranks: ``fork`` on Linux, ``spawn`` on macOS."""
    return "fork" if is_linux() else "spawn"


def interfaces() -> list[str]:
    """The names of this machine's network interfaces (``socket.if_nameindex``)."""
    try:
        return [name for _, name in socket.if_nameindex()]
    except OSError:  # no interface list to read: gloo will say what it finds
        return []


def loopback_interface(names: list[str] | None = None) -> str | None:
    """The loopback among ``names`` (default: this machine's interfaces), looked up in this platform's order of
    likelihood, then any ``lo<digits>``; None when there is none."""
    names = interfaces() if names is None else names
    for candidate in LOOPBACK_NAMES[platform()]:
        if candidate in names:
            return candidate
    return next((n for n in names if n.startswith("lo") and n[2:].isdigit()), None)


def gloo_interface(env: dict[str, str] | None = None, names: list[str] | None = None) -> str:
    """The value of ``GLOO_SOCKET_IFNAME`` for single-node ranks: ``env``'s own (default ``os.environ``) when set
    and every name in it exists among ``names`` (default: this machine's interfaces), else the loopback.

    Raises ``GlooInterfaceError`` (one line, with the fix) for a name the machine lacks, or no loopback."""
    env = os.environ if env is None else env
    names = interfaces() if names is None else names
    wanted = env.get(ENV_IFNAME, "")
    if wanted:
        missing = [n for n in wanted.split(",") if n not in names]
        if missing and names:  # an empty list: the machine would not say, so gloo decides
            raise GlooInterfaceError(
                f"gloo could not use network interface {missing[0]!r} ({ENV_IFNAME}={wanted}): this machine has "
                f"{', '.join(names)}; set it to {loopback_interface(names) or 'one of them'} or unset it"
            )
        return wanted
    found = loopback_interface(names)
    if found is None:
        raise GlooInterfaceError(
            f"gloo needs a loopback network interface and this machine lists none ({', '.join(names) or 'nothing'}):"
            f" set {ENV_IFNAME} to the interface your ranks should use"
        )
    return found


def use_gloo_interface(env: dict[str, str] | None = None) -> str:
    """Set ``GLOO_SOCKET_IFNAME`` in ``env`` (default ``os.environ``, which ranks started later inherit) to
    ``gloo_interface(env)``; returns it. Raises ``GlooInterfaceError`` before any rank exists."""
    env = os.environ if env is None else env
    env[ENV_IFNAME] = gloo_interface(env)
    return env[ENV_IFNAME]


def gloo_failure(text: str, env: dict[str, str] | None = None) -> str | None:
    """The one-line explanation of a rank's error ``text`` when it is gloo failing to use its network interface
    (its C++ enforce message, e.g. ``Unable to find address for: en0``: a name the machine lacks, or an
    interface without an address), else None."""
    marker = "Unable to find address for: "
    if marker not in text:
        return None
    rest = text.split(marker, 1)[1].split()
    name = rest[0].strip("'\"") if rest else "?"
    env = os.environ if env is None else env
    names = interfaces()
    return (
        f"gloo could not use network interface {name!r} ({ENV_IFNAME}={env.get(ENV_IFNAME, '')}; it has no address"
        f" or does not exist): set it to {loopback_interface(names) or 'one of ' + ', '.join(names)} or unset it"
    )


def process_parents() -> dict[int, int]:
    """Every process's parent, ``{pid: ppid}``: from ``/proc`` on Linux, from ``ps`` on macOS (no ``/proc``).
    Empty when neither can be read."""
    if is_linux():
        return _parents_from_proc()
    try:
        out = subprocess.run(["ps", "-A", "-o", "pid=,ppid="], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    pairs = (line.split() for line in out.splitlines())
    return {int(p[0]): int(p[1]) for p in pairs if len(p) == 2 and p[0].isdigit() and p[1].isdigit()}


def _parents_from_proc() -> dict[int, int]:
    parents = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        parents[int(entry)] = int(stat[stat.rfind(b")") + 2 :].split()[1])  # after "pid (comm) state": the ppid
    return parents


def descendants(pid: int, parents: dict[int, int] | None = None) -> list[int]:
    """Every living descendant of ``pid`` (children first, then theirs), from ``process_parents()``."""
    children: dict[int, list[int]] = {}
    for child, parent in (process_parents() if parents is None else parents).items():
        children.setdefault(parent, []).append(child)
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop(0)
        found.append(child)
        todo.extend(children.get(child, []))
    return found
