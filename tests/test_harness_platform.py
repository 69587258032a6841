"""Each platform's choices (cs336_systems/platform_support.py), taken on this machine by forcing the platform.

    pytest tests/test_harness_platform.py -v
    CS336_PLATFORM=macos pytest tests/ --world-sizes 1,2     # the whole suite on the macOS branches (CI)

Linux and macOS differ where the kit starts ranks: the loopback's name (``lo``, ``lo0``), the start method
(fork, spawn), and the Linux-only calls (``prctl``, ``tgkill``, ``/proc``, the zygote). ``CS336_PLATFORM``
makes a Linux machine take the macOS branches, so each choice is tested here without a Mac. These tests never
touch the implementation under test (marker ``harness``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from cs336_systems import launcher, platform_support
from cs336_systems.platform_support import GlooInterfaceError, gloo_interface, loopback_interface
from tests.harness import pool, run_ranks
from tests.harness.limits import die_with_parent
from tests.harness.zygote import enabled

pytestmark = pytest.mark.harness

LINUX_NAMES = ["lo", "eth0", "docker0"]
MAC_NAMES = ["lo0", "gif0", "stf0", "en0", "utun0"]


@pytest.fixture(params=["linux", "macos"])
def forced(request, monkeypatch) -> str:
    """The platform whose branches this test takes (``CS336_PLATFORM``)."""
    monkeypatch.setenv(platform_support.ENV_PLATFORM, request.param)
    return request.param


def test_the_platform_is_the_machines_unless_forced(monkeypatch):
    """Unset: the machine's (WSL2 is Linux); set: the one named; anything else: an error naming the variable."""
    monkeypatch.delenv(platform_support.ENV_PLATFORM, raising=False)
    assert platform_support.platform() == ("linux" if sys.platform.startswith("linux") else "macos")
    monkeypatch.setenv(platform_support.ENV_PLATFORM, "windows")
    with pytest.raises(ValueError, match="CS336_PLATFORM='windows'"):
        platform_support.platform()


@pytest.mark.parametrize(
    "names, linux, macos",
    [
        (LINUX_NAMES, "lo", "lo"),  # macOS's branch on a Linux machine: looked up, not assumed to be lo0
        (MAC_NAMES, "lo0", "lo0"),
        (["lo", "lo0", "en0"], "lo", "lo0"),  # both: each platform's own name first
        (["en0", "lo1"], "lo1", "lo1"),  # another loopback number
        (["eth0", "long0"], None, None),  # no loopback (``long0`` is not one)
    ],
    ids=["linux-machine", "mac-machine", "both-names", "lo1", "none"],
)
def test_the_loopback_is_looked_up_among_the_machines_interfaces(forced, names, linux, macos):
    """The loopback is the one this machine lists, in the platform's order of likelihood; None without one."""
    assert loopback_interface(names) == {"linux": linux, "macos": macos}[forced]


def test_gloo_interface_is_the_loopback_or_the_students_own_when_it_exists(forced):
    """Unset: the loopback found; set to interfaces that exist (one, or several with commas): kept as it is."""
    names = LINUX_NAMES if forced == "linux" else MAC_NAMES
    assert gloo_interface({}, names) == names[0]
    assert gloo_interface({"GLOO_SOCKET_IFNAME": names[1]}, names) == names[1]
    assert gloo_interface({"GLOO_SOCKET_IFNAME": f"{names[0]},{names[1]}"}, names) == f"{names[0]},{names[1]}"


@pytest.mark.parametrize("wanted", ["lo", "lo0,en9"], ids=["linux-name-on-a-mac", "one-of-two-missing"])
def test_a_missing_interface_is_one_line_naming_it_and_the_fix(wanted):
    """GLOO_SOCKET_IFNAME naming an interface the machine lacks: one line with the name, the variable and the
    loopback to use instead, before any rank exists."""
    with pytest.raises(GlooInterfaceError) as info:
        gloo_interface({"GLOO_SOCKET_IFNAME": wanted}, MAC_NAMES)
    message = str(info.value)
    missing = "lo" if wanted == "lo" else "en9"
    assert "\n" not in message and f"'{missing}'" in message and "GLOO_SOCKET_IFNAME" in message, message
    assert "set it to lo0 or unset it" in message, message


def test_no_loopback_is_one_line_saying_to_set_the_variable():
    """A machine with no loopback interface: one line that says to set GLOO_SOCKET_IFNAME."""
    with pytest.raises(GlooInterfaceError, match="set GLOO_SOCKET_IFNAME") as info:
        gloo_interface({}, ["eth0", "wlan0"])
    assert "\n" not in str(info.value)


def test_gloos_enforce_failure_becomes_one_line_with_the_fix(monkeypatch):
    """gloo's C++ enforce message (an interface without an address) is recognised and explained; others are not."""
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "ifb0")
    text = (
        "RuntimeError: [enforce fail at /pytorch/third_party/gloo/gloo/transport/tcp/device.cc:84] ifa != nullptr. "
        "Unable to find address for: ifb0\nException raised from ..."
    )
    problem = platform_support.gloo_failure(text)
    loopback = loopback_interface()
    assert problem is not None and "\n" not in problem and "'ifb0'" in problem, problem
    assert f"set it to {loopback} or unset it" in problem, problem
    assert platform_support.gloo_failure("RuntimeError: Connection reset by peer") is None


def test_every_later_test_gets_the_same_line_once_gloo_could_not_start(monkeypatch):
    """A pool whose GLOO_SOCKET_IFNAME the machine lacks starts no rank and fails with the one line; every later
    pool (any world size) fails at once with it instead of starting ranks that print gloo's C++ message."""
    monkeypatch.setattr(pool, "GLOO_PROBLEM", None)
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "cs336nosuchif0")
    with pytest.raises(pool.GlooUnavailable, match="'cs336nosuchif0'") as first:
        pool.WorkerPool(2, "gloo")
    monkeypatch.delenv("GLOO_SOCKET_IFNAME")
    start = time.monotonic()
    with pytest.raises(pool.GlooUnavailable) as later:
        pool.get_pool(3, "gloo")
    assert str(later.value) == str(first.value) and "\n" not in str(first.value)
    assert time.monotonic() - start < 0.5, "the later pool started ranks instead of failing at once"


def test_the_start_method_is_fork_on_linux_and_spawn_on_macos(forced):
    """Ranks are forked on Linux and spawned on macOS (fork is unsafe once macOS frameworks are loaded)."""
    assert platform_support.start_method() == {"linux": "fork", "macos": "spawn"}[forced]


def test_the_linux_only_calls_are_skipped_on_macos(monkeypatch):
    """On macOS's branch: no zygote (ranks start fresh), no prctl (no-op helpers return False)."""
    monkeypatch.setenv(platform_support.ENV_PLATFORM, "macos")
    assert not enabled() and not die_with_parent()
    monkeypatch.setenv(platform_support.ENV_PLATFORM, "linux")
    assert enabled() == (os.environ.get("CS336_ZYGOTE", "1") != "0")


def test_rlimit_as_is_left_alone_on_macos(monkeypatch):
    """macOS does not enforce RLIMIT_AS: its branch sets nothing (the Linux branch: the grader's tests)."""
    import resource

    from tests.harness.limits import cap

    monkeypatch.setenv(platform_support.ENV_PLATFORM, "macos")
    before = resource.getrlimit(resource.RLIMIT_AS)
    assert cap(resource.RLIMIT_AS, 4 << 40) == 4 << 40
    assert resource.getrlimit(resource.RLIMIT_AS) == before, "RLIMIT_AS was set on macOS's branch"


def test_process_parents_come_from_proc_on_linux_and_from_ps_on_macos(forced):
    """Both branches find this process's parent and a child's descendants (pool.close kills them)."""
    parents = platform_support.process_parents()
    assert parents.get(os.getpid()) == os.getppid(), f"{forced}: this process's parent not found"
    child = subprocess.Popen([sys.executable, "-c", "import subprocess; subprocess.run(['sleep', '30'])"])
    try:
        end = time.monotonic() + 30
        while len(found := platform_support.descendants(child.pid)) < 1 and time.monotonic() < end:
            time.sleep(0.05)
        assert len(found) == 1, f"{forced}: the child's own child not found: {found}"
    finally:
        child.kill()
        child.wait()


class _Chosen(Exception):
    pass


def test_the_launcher_forks_on_linux_and_spawns_on_macos(forced, monkeypatch):
    """``launcher.launch`` asks for the platform's start method (no rank is started here: the choice is what is
    tested; the suite under CS336_PLATFORM=macos runs Part 10's launches on spawn)."""

    def chosen(method):
        raise _Chosen(method)

    monkeypatch.setattr(launcher.multiprocessing, "get_context", chosen)
    with pytest.raises(_Chosen) as info:
        launcher.launch(_interface_job, 2)
    assert info.value.args == ({"linux": "fork", "macos": "spawn"}[forced],)


def _interface_job(rank) -> str | None:
    return os.environ.get("GLOO_SOCKET_IFNAME")


def test_the_launchers_ranks_use_the_interface_platform_support_picks():
    """A rank the launcher starts sees the interface platform_support picked in GLOO_SOCKET_IFNAME."""
    outcomes = launcher.launch(_interface_job, 1, deadline=120)
    assert outcomes[0].ok, launcher.describe_outcomes(outcomes)
    assert outcomes[0].value == gloo_interface()


def test_the_launcher_refuses_a_missing_interface_before_starting_a_rank(monkeypatch):
    """A GLOO_SOCKET_IFNAME naming no interface here fails in the parent, naming it, before any rank starts."""
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "cs336nosuchif0")
    with pytest.raises(GlooInterfaceError, match="'cs336nosuchif0'"):
        launcher.launch(_interface_job, 2)


def parent_rank(ctx) -> int:
    return os.getppid()


@pytest.mark.skipif(enabled(), reason="the zygote's path: tests/test_harness_zygote.py (CS336_PLATFORM=macos)")
def test_without_the_zygote_each_rank_is_a_child_of_this_process(world_size):
    """macOS's path (and CS336_ZYGOTE=0): every rank is started fresh by the pytest process itself."""
    assert run_ranks(world_size, parent_rank) == [os.getpid()] * world_size


def test_a_pool_whose_ranks_could_not_start_gloo_fails_with_the_one_line(monkeypatch, tmp_path):
    """gloo's enforce message in a rank's reply (an interface without an address: the name exists, so the parent
    could not tell) ends the pool and becomes the one line every later test fails with."""
    monkeypatch.setattr(pool, "GLOO_PROBLEM", None)
    stub = pool.WorkerPool.__new__(pool.WorkerPool)  # no ranks: only the reply is judged
    stub.env, stub.ranks, stub.tmp = {"GLOO_SOCKET_IFNAME": "ifb0"}, [], tmp_path
    error = "RuntimeError: [enforce fail at tcp/device.cc:84] ifa != nullptr. Unable to find address for: ifb0"
    with pytest.raises(pool.GlooUnavailable, match="'ifb0'"):
        stub._check_gloo_started({0: {"status": "error", "error": error}, 1: {"status": "error", "error": error}})
    assert pool.GLOO_PROBLEM is not None and "\n" not in pool.GLOO_PROBLEM
    stub._check_gloo_started({0: {"status": "error", "error": "ValueError: a test's own error"}})  # not gloo's: no-op
