"""Given code for Tasks 10.5-10.6: the launcher, its faults, and the training job (handouts/10-failures.md §10.5).

Not a task: read it, do not change it (like ``models.py``, the grader always uses its own copy). Your
``fault_tolerance.py`` imports what it needs from here and re-exports it, so ``fault_tolerance.launch`` and
``fault_tolerance.TrainConfig`` work as well.

  ``launch(job, world_size, *args, ...)`` forks the ranks of one attempt from this process (fork is cheap:
      torch is already imported; spawn is used on macOS, which forks badly once system frameworks are loaded,
      and once CUDA is initialized, which fork would break: ``job`` and ``args`` must then be picklable). Each
      rank joins its own process group through a ``FileStore`` in a fresh folder (no port to collide) over
      the interface ``platform_support.gloo_interface()`` picks (the loopback, or your ``GLOO_SOCKET_IFNAME``),
      dies with its parent (``PR_SET_PDEATHSIG``, Linux), says when it has joined, and ends with one message:
      what ``job`` returned or raised. When a rank dies without a message, ``launch`` posts ``dead/<rank>`` in
      the job's store, as a cluster scheduler would tell the job; a deadline (counted from when every rank has
      joined, so that starting them is not counted), and a grace period after the first failure, kill whatever
      is left (faulthandler stacks first), so ``launch`` always returns, with one ``RankOutcome`` per rank.
      ``launch`` imports ``torch._dynamo`` once before forking: AdamW's first step imports it otherwise, in
      every forked rank, which takes seconds of a short deadline (a script that drives ``supervise`` outside
      pytest would see its first attempt time out).
  ``JobRank`` is what a forked rank's job gets: rank, world size, attempt, group, store, and ``reached(step,
      point)``, where a test's ``FaultPlan`` kills the rank: SIGKILL (the process is gone, its sockets close)
      or SIGSTOP (it hangs with its sockets open, like a GPU that stopped answering: peers' collectives block,
      as they do on NCCL, where a dead peer is never reported by the collective itself).
  ``PeerFailure`` is what a survivor raises (your ``FailureDetector`` raises it; the launcher reports it).
  ``run_training`` is the job the tests and the benchmark run (``fault_tolerance.train_job`` calls it with
      your parts): DDP (``ddp.all_reduce_gradients_flat``, Task 2.2) or FSDP (``fsdp.FSDP``, Task 3.3)
      training a small float64 MLP with AdamW on a fixed synthetic data set with a fixed global batch (rank r
      of N takes rows [r B/N, (r+1) B/N) of step s's batch, so the data order needs no state), a committed
      checkpoint every k steps (``checkpoint.save_checkpoint``, Task 10.1), resuming through
      ``checkpoint.load_checkpoint`` (Task 10.2), which reshards FSDP's flat shards to the new world size.
      Every wait on the peers is guarded by ``FailureDetector.waiting``; each step starts with ``beat(step)``.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import faulthandler
import importlib
import multiprocessing
import os
import pickle
import shutil
import signal
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from cs336_systems import platform_support

__all__ = [
    "FaultPlan",
    "PeerFailure",
    "JobRank",
    "RankOutcome",
    "launch",
    "describe_outcomes",
    "exit_name",
    "TrainConfig",
    "build_model",
    "batch",
    "make_optimizer",
    "init_adamw_state",
    "run_training",
]

STACK_CHARS = 4000  # how much of a killed rank's stack dump RankOutcome.stacks keeps (whole lines, innermost first)
STARTUP_S = 120.0  # how long starting the ranks and joining the group may take, on top of launch's deadline


# ---------------------------------------------------------------------------------------------
# Faults, failures, and the launcher of one attempt
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FaultPlan:
    """Kill ``rank`` when it reaches ``point`` of step ``step`` in attempt ``attempt`` (``JobRank.reached``).

    ``signal``: ``SIGKILL`` (the process is gone) or ``SIGSTOP`` (it hangs, sockets open, until ``launch``
    kills it). Points of ``train_job``: ``"sync"`` (DDP: after backward, before the gradient all-reduce;
    FSDP: before the forward's all-gathers) and ``"save"`` (just before the checkpoint of step ``step``,
    which follows the training of step ``step - 1``: the rank's last heartbeat carries step ``step - 1``)."""

    rank: int
    step: int
    point: str = "sync"
    signal: int = signal.SIGKILL
    attempt: int = 0


class PeerFailure(RuntimeError):
    """Raised by a survivor: rank ``dead_rank`` failed at its step ``step`` while rank ``rank`` waited for
    ``waiting_for``. ``how`` says how it was noticed (its process exited, or no heartbeat for so long)."""

    def __init__(self, rank: int, dead_rank: int, step: int | None, waiting_for: str, how: str) -> None:
        self.rank, self.dead_rank, self.step, self.waiting_for, self.how = rank, dead_rank, step, waiting_for, how
        self.noticed_at = time.time()
        super().__init__(
            f"rank {rank}: rank {dead_rank} failed at step {step} ({how}) while this rank was waiting for {waiting_for}"
        )

    def __reduce__(self):  # picklable with all its fields (it travels from a rank to the supervisor)
        return (_rebuild_failure, (self.rank, self.dead_rank, self.step, self.waiting_for, self.how, self.noticed_at))


def _rebuild_failure(rank, dead_rank, step, waiting_for, how, noticed_at) -> PeerFailure:
    failure = PeerFailure(rank, dead_rank, step, waiting_for, how)
    failure.noticed_at = noticed_at
    return failure


@dataclass
class JobRank:
    """What ``launch`` gives each rank's job: its place, its process group (the default group of this
    process, over the attempt's ranks), the job's ``store`` (shared by the attempt's ranks; the launcher
    posts ``dead/<rank>`` there), and the fault plan (``reached``)."""

    rank: int
    world_size: int
    attempt: int
    store: Any  # a torch.distributed Store
    device: torch.device
    fault: FaultPlan | None = None
    _conn: Any = field(default=None, repr=False)

    @property
    def group(self) -> dist.ProcessGroup:
        return dist.group.WORLD

    def reached(self, step: int, point: str) -> None:
        """The job is at ``point`` of step ``step``: if the fault plan says so, this rank is killed here."""
        f = self.fault
        if f is not None and (f.rank, f.step, f.point, f.attempt) == (self.rank, step, point, self.attempt):
            self.store.set("fault", f"{self.rank} {step} {point} {time.time():.6f}")
            os.kill(os.getpid(), f.signal)

    def fail(self, failure: PeerFailure) -> None:
        """Report ``failure`` to the supervisor and end this process now (called from any thread: a rank
        blocked in a collective with a hung peer cannot be unblocked, only ended)."""
        _send_and_exit(self._conn, ("failure", failure), 1)


@dataclass
class RankOutcome:
    """How one rank of one attempt ended: ``value`` (the job returned), ``failure`` (it raised
    ``PeerFailure``), ``error`` (another exception's traceback, or "killed by the launcher ..."), and the
    process's ``exitcode`` (negative: the signal that ended it); ``reported_at`` is when its message came."""

    rank: int
    value: Any = None
    failure: PeerFailure | None = None
    error: str | None = None
    exitcode: int | None = None
    reported_at: float | None = None
    stacks: str = ""
    fault_at: float | None = None  # when the fault plan fired in this rank (``time.time()``), if it did

    @property
    def ok(self) -> bool:
        return self.error is None and self.failure is None and self.exitcode == 0

    @property
    def died(self) -> bool:
        """Ended without a message (killed, crashed, or stopped and killed by the launcher)."""
        return self.reported_at is None


def _prctl_pdeathsig() -> None:
    if not platform_support.is_linux():
        return  # no prctl: the launcher's deadline still ends every rank
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the launcher's deadline still ends every rank


_REPORT_LOCK = threading.Lock()  # one message per rank: the first thread to report ends the process


def _send_and_exit(conn, message, code: int) -> None:
    _REPORT_LOCK.acquire()  # a second reporter (the heartbeat thread, the main thread) waits here for the exit
    try:  # plain pickle: multiprocessing's would pass tensors through shared memory this process takes away
        conn.send_bytes(pickle.dumps(message))
    except Exception:  # noqa: BLE001 - an unpicklable value must not leave the supervisor waiting
        conn.send_bytes(pickle.dumps(("error", f"the rank's message could not be sent:\n{traceback.format_exc()}")))
    finally:
        with contextlib.suppress(Exception):
            faulthandler.disable()
        os._exit(code)  # no atexit, no destructors: the inherited state of the parent is not ours to tear down


def _to_cpu(value):
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value


_INHERITED: list = []  # a forked rank keeps its parent's process-group state alive here, unused and untouched


try:  # glibc >= 2.30 has tgkill; macOS has none (nor does CS336_PLATFORM=macos look for it)
    _TGKILL = getattr(ctypes.CDLL(None, use_errno=True), "tgkill", None) if platform_support.is_linux() else None
except OSError:  # no C library to ask: signals go to the process
    _TGKILL = None


def _signal_main_thread(pid: int, signum: int) -> None:
    """Send ``signum`` to the main thread of process ``pid`` (Linux: ``tgkill``, the main thread's id is the
    pid), elsewhere to the process. A signal sent to a process lands on any of its threads (torch's and gloo's
    included); its handler then runs there while the main thread, continued, runs on. Sent to the main thread,
    the handler runs in place of the main thread's next line of Python."""
    if _TGKILL is None or _TGKILL(pid, pid, signum) != 0:
        os.kill(pid, signum)


def rank_device(backend: str, rank: int) -> torch.device:
    """The device a job's rank works on: under NCCL its GPU (round robin over the node's), under gloo the CPU.
    (On gloo, the tests' device-faithful mode answers ``cuda:rank`` here: the job stands for an NCCL one.)"""
    if backend == "nccl":
        return torch.device(f"cuda:{rank % torch.cuda.device_count()}")
    return torch.device("cpu")


def _rank_main(job, args, rank, world_size, attempt, folder, fault, backend, group_timeout, ifname, conn) -> None:
    _prctl_pdeathsig()
    os.environ[platform_support.ENV_IFNAME] = ifname
    if os.getppid() == 1:  # the parent died before the line above took effect
        os._exit(1)
    stacks = open(Path(folder) / f"rank{rank}.stacks", "w")  # noqa: SIM115 - held for faulthandler
    # SIGUSR1 dumps every thread's stack (faulthandler, in C: it works while Python is stuck in C code) and then,
    # chained, ends the process by SIGUSR1's default action, inside the handler: the launcher sends it to the
    # main thread (_signal_main_thread), so a rank it continued (SIGCONT) to take its stack runs no Python after.
    faulthandler.unregister(signal.SIGUSR1)  # a registration inherited from the parent would keep its own chain
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})  # a mask inherited from a forking thread
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True, chain=True)
    try:
        # A forked child inherits the parent's default process group: leave it alone (destroying it would
        # close sockets the parent still uses) and start a fresh c10d world of our own.
        from torch.distributed import distributed_c10d as c10d

        _INHERITED.append(c10d._world)
        c10d._world = c10d._World()
        device = rank_device(backend, rank)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        store = dist.FileStore(str(Path(folder) / "store"), world_size)
        job_store = dist.PrefixStore("job/", store)
        dist.init_process_group(backend, store=dist.PrefixStore("pg/", store), rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=group_timeout))  # fmt: skip
        # gloo connects its full mesh pair by pair: a rank whose job ended (or died) at once could close its
        # sockets while a slower peer is still connecting, failing that peer's init as if it had a bug. The
        # job starts only once every rank is connected.
        dist.barrier()
        conn.send_bytes(pickle.dumps(("joined", None)))  # the launcher's deadline starts when every rank has joined
        me = JobRank(rank, world_size, attempt, job_store, device, fault, conn)
        value = job(me, *args)
        _send_and_exit(conn, ("ok", _to_cpu(value)), 0)
    except PeerFailure as failure:
        _send_and_exit(conn, ("failure", failure), 1)
    except BaseException:  # noqa: BLE001 - everything a rank did wrong goes to the supervisor as text
        text = traceback.format_exc()  # gloo's enforce failure on its interface: one line with the fix instead
        _send_and_exit(conn, ("error", platform_support.gloo_failure(text) or text), 1)


def launch(job: Callable, world_size: int, *args, attempt: int = 0, fault: FaultPlan | None = None,
           deadline: float = 60.0, grace: float = 5.0, group_timeout: float = 60.0,
           backend: str | None = None) -> list[RankOutcome]:  # fmt: skip
    """Run ``job(JobRank, *args)`` on ``world_size`` new rank processes; return one ``RankOutcome`` per rank.

    Ranks are forked from this process (spawned on macOS or if CUDA is initialized here: ``job`` and ``args``
    must then be picklable). Each joins a fresh default process group (``backend``: gloo, or nccl when this
    process has CUDA) through a ``FileStore`` in a new temporary folder. Raises
    ``platform_support.GlooInterfaceError`` (one line, with the fix) before starting any rank when
    ``GLOO_SOCKET_IFNAME`` names an interface this machine lacks. A rank that dies without a message gets
    ``dead/<rank>`` posted in the job store at once. ``launch`` returns when every rank has ended; ranks
    still running ``grace`` seconds after the first failure, or ``deadline`` seconds after every rank joined
    the group (starting them may take ``STARTUP_S`` more), are sent SIGUSR1 (their Python stacks go to
    ``RankOutcome.stacks``) and then SIGKILL. No rank outlives ``launch``.
    """
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    backend = backend or ("nccl" if torch.cuda.is_available() and torch.cuda.is_initialized() else "gloo")
    ifname = platform_support.gloo_interface()
    method = "spawn" if torch.cuda.is_available() and torch.cuda.is_initialized() else platform_support.start_method()
    if method == "fork":
        importlib.import_module("torch._dynamo")  # AdamW's first step imports it: seconds once, not in every rank
    ctx = multiprocessing.get_context(method)
    folder = tempfile.mkdtemp(prefix=f"cs336-job-a{attempt}-")
    outcomes = [RankOutcome(r) for r in range(world_size)]
    procs, conns, grace_end = [], {}, None
    try:
        for r in range(world_size):
            mine, theirs = ctx.Pipe(duplex=False)
            rank_args = (job, args, r, world_size, attempt, folder, fault, backend, group_timeout, ifname, theirs)
            p = ctx.Process(target=_rank_main, name=f"rank{r}", args=rank_args, daemon=True)
            p.start()
            theirs.close()
            procs.append(p)
            conns[mine] = r
        store = dist.PrefixStore("job/", dist.FileStore(str(Path(folder) / "store"), world_size))
        # The deadline counts from when every rank has joined the group: starting the ranks (seconds of
        # importing torch per rank under spawn, on macOS) must not eat a short deadline. At most STARTUP_S more.
        end = time.monotonic() + STARTUP_S + deadline
        running = {p.sentinel: r for r, p in enumerate(procs)}
        by_rank = {r: c for c, r in conns.items()}
        joined: set[int] = set()

        def take_message(r: int) -> None:
            conn = by_rank.get(r)
            while conn is not None and conn.poll():
                try:
                    kind, payload = pickle.loads(conn.recv_bytes())
                except (EOFError, OSError):
                    by_rank.pop(r)
                    return  # ended without a message: the sentinel says how
                if kind == "joined":
                    joined.add(r)
                    continue
                by_rank.pop(r)
                outcomes[r].reported_at = time.time()
                setattr(outcomes[r], {"ok": "value", "failure": "failure"}.get(kind, "error"), payload)
                return

        killed: set[int] = set()
        all_joined = False
        while running:
            ready = wait([*by_rank.values(), *running], timeout=max(0.0, end - time.monotonic()))
            if not ready:
                break
            for obj in ready:
                if obj in running:
                    r = running.pop(obj)
                    take_message(r)  # a message sent just before the exit comes first
                    by_rank.pop(r, None)
                    procs[r].join()
                    outcomes[r].exitcode = procs[r].exitcode
                    if outcomes[r].reported_at is None:
                        store.set(f"dead/{r}", str(procs[r].exitcode))  # the scheduler's notice
                elif (r := next((r for r, c in by_rank.items() if c is obj), None)) is not None:
                    take_message(r)
            if len(joined) == world_size and not all_joined:
                all_joined = True
                end = min(end, time.monotonic() + deadline)
            if any(o.failure or o.error or (o.exitcode is not None and o.reported_at is None) for o in outcomes):
                grace_end = grace_end or time.monotonic() + grace
                end = min(end, grace_end)
            named = {o.failure.dead_rank for o in outcomes if o.failure is not None}
            if running and set(running.values()) <= named:  # all that is left are ranks the others saw fail
                for r in set(running.values()) - killed:
                    killed.add(r)
                    outcomes[r].error = "killed by the launcher: its peers reported it failed"
                    os.kill(procs[r].pid, signal.SIGKILL)
        if store.check(["fault"]):
            r, _, _, at = store.get("fault").decode().split()
            outcomes[int(r)].fault_at = float(at)
        for r, proc in enumerate(procs):  # past the deadline or the grace period: stacks, then SIGKILL
            if proc.sentinel in running and outcomes[r].error is None:
                outcomes[r].stacks = _stacks_of(proc, Path(folder) / f"rank{r}.stacks")
                outcomes[r].error = "killed by the launcher: still running at the deadline or grace period"
    finally:
        for p in procs:
            if p.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGKILL)
            p.join(timeout=10)
        for r, p in enumerate(procs):
            if outcomes[r].exitcode is None:
                outcomes[r].exitcode = p.exitcode
        for c in conns:
            c.close()
        shutil.rmtree(folder, ignore_errors=True)
    return outcomes


def exit_name(code: int | None) -> str:
    """``"SIGKILL"`` for -9, ``"code 1"`` for 1."""
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return signal.Signals(-code).name
    return f"code {code}"


def describe_outcomes(outcomes: list[RankOutcome]) -> str:
    """One paragraph per rank: how it ended, what it reported, and its stack when the launcher killed it."""
    lines = []
    for o in outcomes:
        if o.ok:
            lines.append(f"--- rank {o.rank}: finished")
        elif o.failure is not None:
            lines.append(f"--- rank {o.rank}: reported {o.failure}")
        elif o.died:
            lines.append(f"--- rank {o.rank}: ended by {exit_name(o.exitcode)} without a report"
                         + (f" ({o.error})" if o.error else ""))  # fmt: skip
        else:
            lines.append(f"--- rank {o.rank}: raised\n{o.error.rstrip()}")
        if o.stacks:
            lines.append(f"its Python stack:\n{o.stacks.rstrip()}")
    return "\n".join(lines)


def _stacks_of(proc, path: Path) -> str:
    """The rank's Python stacks, then its end. A stopped (SIGSTOP) rank cannot run a signal handler until
    it is continued, and once continued it would run on: finish its step, save a checkpoint, exit 0. So
    SIGUSR1 first (pending), then SIGCONT: the handler runs before any Python code, dumps the stacks and
    ends the process (SIGUSR1's default action, chained: ``_rank_main``); SIGKILL if it is still there."""
    with contextlib.suppress(ProcessLookupError):
        _signal_main_thread(proc.pid, signal.SIGUSR1)
        os.kill(proc.pid, signal.SIGCONT)
    proc.join(timeout=1.0)
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    lines, below_rank = [], False  # per thread, most recent call first: drop the frames under _rank_main
    for line in text.splitlines():
        if not line.startswith(" "):  # "Thread 0x... (most recent call first):", "Current thread ..."
            below_rank = False
        if not below_rank:
            lines.append(line)
        below_rank = below_rank or line.endswith(" in _rank_main")
    text = "\n".join(lines) + "\n"
    if len(text) <= STACK_CHARS:
        return text
    return text[: text.rfind("\n", 0, STACK_CHARS) + 1] + "...\n"  # whole lines, the most recent calls


# ---------------------------------------------------------------------------------------------
# The training job (DDP or FSDP from parts 2-3, checkpoints from Tasks 10.1-10.2)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainConfig:
    """The job: ``steps`` AdamW steps of a float64 MLP, one committed checkpoint every ``checkpoint_every``."""

    directory: str  # checkpoints go here: one step folder per save (part 10.1)
    strategy: str = "ddp"  # "ddp": all_reduce_gradients_flat (Task 2.2); "fsdp": FSDP (Task 3.3)
    steps: int = 6
    global_batch: int = 12  # rows of every step's batch, split evenly over the ranks
    checkpoint_every: int = 2
    dims: tuple[int, int, int] = (5, 7, 3)  # in, hidden, out: weights of 35 and 21 elements (uneven shards)
    lr: float = 0.05
    seed: int = 0
    heartbeat_interval: float = 0.05  # seconds between two heartbeats of a rank
    heartbeat_timeout: float = 1.0  # a peer silent this long has failed


def build_model(config: TrainConfig) -> nn.Sequential:
    """The same initial float64 model on every rank (seeded by ``config.seed``)."""
    d_in, d_hidden, d_out = config.dims
    gen = torch.Generator().manual_seed(config.seed)
    model = nn.Sequential(nn.Linear(d_in, d_hidden), nn.Tanh(), nn.Linear(d_hidden, d_out)).double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.5)
    return model


def batch(config: TrainConfig, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``step``'s global batch (inputs, targets), a pure function of the step: no sampler state."""
    gen = torch.Generator().manual_seed(config.seed * 100_003 + step)
    x = torch.randn(config.global_batch, config.dims[0], generator=gen, dtype=torch.float64)
    y = torch.randn(config.global_batch, config.dims[2], generator=gen, dtype=torch.float64)
    return x, y


def make_optimizer(params) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=0.05, weight_decay=0.01)


def init_adamw_state(optimizer: torch.optim.Optimizer) -> None:
    """Create AdamW's state as it is before its first step (zeros, step 0), so a checkpoint has tensors to
    load into; a first step from these zeros is exactly the step AdamW takes from its lazy initialization."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            if not optimizer.state.get(p):
                optimizer.state[p] = {"step": torch.zeros((), device="cpu"), "exp_avg": torch.zeros_like(p),
                                      "exp_avg_sq": torch.zeros_like(p)}  # fmt: skip


def run_training(rank: JobRank, config: TrainConfig, start_step: int = 0, *, checkpoint, ddp, fsdp,
                 detector: Callable) -> dict:  # fmt: skip
    """One rank of the training job, from the committed checkpoint of ``start_step`` (0: from scratch) to
    ``config.steps``, on the given implementation: the modules ``checkpoint`` (``save_checkpoint``,
    ``load_checkpoint``, ``module_state``, ``fsdp_state``, ``optimizer_state``), ``ddp``
    (``all_reduce_gradients_flat``), ``fsdp`` (``FSDP``) and the class ``detector`` (a ``FailureDetector``).
    Returns ``{"params": full parameters, "start_step": ..., "losses": [...], "step_ends": [...]}``
    (``step_ends``: when each step's optimizer step was done, ``time.time()``).

    Each step starts with ``detector.beat(step)``; every wait on the peers is guarded by
    ``detector.waiting(what)``, so a failure ends the rank with a ``PeerFailure`` (or, for a hung peer, the
    detector's thread calls ``on_failure=rank.fail``, which reports and ends the process). What is waited
    for: ``"loading the checkpoint of step s"``, ``"the gradient all-reduce of step s"`` (DDP),
    ``"the all-gathers and reduce-scatters of step s (FSDP)"``, ``"the checkpoint of step s"`` (the save
    after step s - 1: a peer killed at ``point="save"`` of step s carries step s - 1 in its last heartbeat),
    ``"the final all-gather of the parameters"``."""

    group, world, me = rank.group, rank.world_size, rank.rank
    if config.global_batch % world:
        raise ValueError(f"global_batch ({config.global_batch}) must divide by the world size ({world})")
    if config.strategy not in ("ddp", "fsdp"):
        raise ValueError(f"config.strategy must be 'ddp' or 'fsdp', got {config.strategy!r}")
    fsdp_run = config.strategy == "fsdp"
    model = build_model(config).to(rank.device)
    trained = fsdp.FSDP(model, group=group) if fsdp_run else model
    optimizer = make_optimizer(trained.parameters())
    init_adamw_state(optimizer)  # state exists from the start: the first checkpoint and a load have tensors

    def state() -> dict:  # parameters and AdamW state as checkpoint Shards (FSDP: boxes of the flat weights)
        params = checkpoint.fsdp_state(trained, group=group) if fsdp_run else checkpoint.module_state(model)
        return {**params, **checkpoint.optimizer_state(optimizer, params)}

    detector = detector(rank.store, me, world, interval=config.heartbeat_interval,
                               timeout=config.heartbeat_timeout, on_failure=rank.fail)  # fmt: skip
    rows = slice(me * config.global_batch // world, (me + 1) * config.global_batch // world)
    losses, step_ends = [], []
    with detector:
        if start_step:
            with detector.waiting(f"loading the checkpoint of step {start_step}"):
                checkpoint.load_checkpoint(state(), config.directory, start_step, group=group)
        for step in range(start_step, config.steps):
            detector.beat(step)
            x, y = (t.to(rank.device) for t in batch(config, step))
            if fsdp_run:
                rank.reached(step, "sync")
                with detector.waiting(f"the all-gathers and reduce-scatters of step {step} (FSDP)"):
                    loss = nn.functional.mse_loss(trained(x[rows]), y[rows])
                    loss.backward()
            else:
                loss = nn.functional.mse_loss(model(x[rows]), y[rows])
                loss.backward()
                rank.reached(step, "sync")
                with detector.waiting(f"the gradient all-reduce of step {step}"):
                    ddp.all_reduce_gradients_flat(model, group=group)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            step_ends.append(time.time())
            if (step + 1) % config.checkpoint_every == 0 and step + 1 < config.steps:
                rank.reached(step + 1, "save")
                with detector.waiting(f"the checkpoint of step {step + 1}"):
                    checkpoint.save_checkpoint(state(), config.directory, step + 1, group=group)
        with detector.waiting("the final all-gather of the parameters"):
            params = trained.gather_full_params() if fsdp_run else dict(model.state_dict())
    return {"params": {k: v.detach().clone() for k, v in params.items()}, "start_step": start_step,
            "losses": losses, "step_ends": step_ends}  # fmt: skip
