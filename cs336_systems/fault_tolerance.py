"""Failures at scale, part 2: a killed rank, a restart, and live recovery (handouts/10-failures.md §10.5-§10.6).

A job of N rank processes loses one of them: SIGKILL, the out-of-memory killer, a GPU that stops answering.
The others must not hang: they notice within a deadline and say which rank failed, at which step, and what
they were waiting for. Then the job goes on, either by restarting every rank from the last committed
checkpoint (at the same world size with a spare, or at a smaller one through resharding: Task 10.5), or,
with replicas (DDP, HSDP), by handing a replacement the state of a healthy replica over the network while
the others keep theirs (torchft's live recovery: Task 10.6).

Design note (what is given, what you write, and why)
----------------------------------------------------
Given, outside the solution markers (read it; the tests and the benchmark run it):
  ``launch(job, world_size, *args, ...)`` forks the ranks of one attempt from this process (fork is cheap:
      torch is already imported; spawn is used once CUDA is initialized, which fork would break). Each rank
      joins its own process group through a ``FileStore`` in a fresh folder (no port to collide), dies with
      its parent (``PR_SET_PDEATHSIG``), and ends with one message: what ``job`` returned or raised. When a
      rank dies without a message, ``launch`` posts ``dead/<rank>`` in the job's store, as a cluster
      scheduler would tell the job; a deadline, and a grace period after the first failure, kill whatever is
      left (faulthandler stacks first), so ``launch`` always returns, with one ``RankOutcome`` per rank.
  ``JobRank`` is what a forked rank's job gets: rank, world size, attempt, group, store, and ``reached(step,
      point)``, where a test's ``FaultPlan`` kills the rank: SIGKILL (the process is gone, its sockets close)
      or SIGSTOP (it hangs with its sockets open, like a GPU that stopped answering: peers' collectives block,
      as they do on NCCL, where a dead peer is never reported by the collective itself).
  ``PeerFailure`` is what a survivor raises. ``train_job`` is the job the tests and the benchmark run: your
      DDP (``all_reduce_gradients_flat``, part 2) or FSDP (part 3) training a small float64 MLP with AdamW on
      a fixed synthetic data set with a fixed global batch (rank r of N takes rows [r B/N, (r+1) B/N) of step
      s's batch, so the data order needs no state), a committed checkpoint every k steps (your
      ``checkpoint.save_checkpoint``, parts 10.1-10.3), resuming through ``checkpoint.load_checkpoint``,
      which reshards FSDP's flat shards to the new world size.
You write:
  Task 10.5  ``FailureDetector``: heartbeats through the store from a background thread, and a guard around
      every wait of the job (``waiting``): a collective that raises because a peer died (gloo) becomes a
      ``PeerFailure`` naming the dead rank; a wait that blocks on a hung peer (NCCL, SIGSTOP) is ended by the
      thread when the peer's heartbeat is older than ``timeout`` (the process reports and exits: a blocked
      collective cannot be cancelled from Python). ``plan_restart``: from the newest COMMITTED checkpoint, at
      the largest world size the healthy ranks allow that divides the global batch. ``supervise``: launch,
      collect the failures, plan, launch again.
  Task 10.6  ``replica_state`` / ``load_replica_state`` (everything a replica needs: parameters, optimizer
      state, step), ``send_replica_state`` (the transfer, point to point, healthy -> replaced, bytes = the
      state's size plus a small header) and ``recover_replica`` (who sends: a healthy replica, never the
      replaced one).
Why both heartbeats and errors: gloo raises "Connection closed by peer" the moment a peer's process dies,
so on gloo the error path is fast; NCCL does not, and a hung (not dead) peer closes nothing. Heartbeats are
the only signal that covers both; ``timeout`` trades detection time against false alarms on a loaded node.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import faulthandler
import multiprocessing
import os
import pickle
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

from . import checkpoint, ddp, fsdp  # yours: parts 10.1-10.3, 2 and 3 (imported here, so forked ranks inherit them)

__all__ = [
    "FaultPlan",
    "PeerFailure",
    "JobRank",
    "RankOutcome",
    "launch",
    "TrainConfig",
    "train_job",
    "FailureDetector",
    "RestartPlan",
    "plan_restart",
    "Attempt",
    "JobHistory",
    "supervise",
    "describe_outcomes",
    "replica_state",
    "load_replica_state",
    "send_replica_state",
    "recover_replica",
]


# ---------------------------------------------------------------------------------------------
# Given: faults, failures, and the launcher of one attempt
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FaultPlan:
    """Kill ``rank`` when it reaches ``point`` of step ``step`` in attempt ``attempt`` (``JobRank.reached``).

    ``signal``: ``SIGKILL`` (the process is gone) or ``SIGSTOP`` (it hangs, sockets open, until ``launch``
    kills it). Points of ``train_job``: ``"sync"`` (DDP: after backward, before the gradient all-reduce;
    FSDP: before the forward's all-gathers) and ``"save"`` (just before the checkpoint of step ``step``)."""

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


def _rank_main(job, args, rank, world_size, attempt, folder, fault, backend, group_timeout, conn) -> None:
    _prctl_pdeathsig()
    if os.getppid() == 1:  # the parent died before the line above took effect
        os._exit(1)
    stacks = open(Path(folder) / f"rank{rank}.stacks", "w")  # noqa: SIM115 - held for faulthandler
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True, chain=False)
    try:
        # A forked child inherits the parent's default process group: leave it alone (destroying it would
        # close sockets the parent still uses) and start a fresh c10d world of our own.
        from torch.distributed import distributed_c10d as c10d

        _INHERITED.append(c10d._world)
        c10d._world = c10d._World()
        device = torch.device("cpu")
        if backend == "nccl":
            device = torch.device(f"cuda:{rank % torch.cuda.device_count()}")
            torch.cuda.set_device(device)
        store = dist.FileStore(str(Path(folder) / "store"), world_size)
        job_store = dist.PrefixStore("job/", store)
        dist.init_process_group(backend, store=dist.PrefixStore("pg/", store), rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=group_timeout))  # fmt: skip
        me = JobRank(rank, world_size, attempt, job_store, device, fault, conn)
        value = job(me, *args)
        _send_and_exit(conn, ("ok", _to_cpu(value)), 0)
    except PeerFailure as failure:
        _send_and_exit(conn, ("failure", failure), 1)
    except BaseException:  # noqa: BLE001 - everything a rank did wrong goes to the supervisor as text
        _send_and_exit(conn, ("error", traceback.format_exc()), 1)


def launch(job: Callable, world_size: int, *args, attempt: int = 0, fault: FaultPlan | None = None,
           deadline: float = 60.0, grace: float = 5.0, group_timeout: float = 60.0,
           backend: str | None = None) -> list[RankOutcome]:  # fmt: skip
    """Run ``job(JobRank, *args)`` on ``world_size`` new rank processes; return one ``RankOutcome`` per rank.

    Ranks are forked from this process (spawned if CUDA is initialized here: ``job`` and ``args`` must then
    be picklable). Each joins a fresh default process group (``backend``: gloo, or nccl when this process
    has CUDA) through a ``FileStore`` in a new temporary folder. A rank that dies without a message gets
    ``dead/<rank>`` posted in the job store at once. ``launch`` returns when every rank has ended; ranks
    still running ``grace`` seconds after the first failure, or at ``deadline``, are sent SIGUSR1 (their
    Python stacks go to ``RankOutcome.stacks``) and then SIGKILL. No rank outlives ``launch``.
    """
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    backend = backend or ("nccl" if torch.cuda.is_available() and torch.cuda.is_initialized() else "gloo")
    method = "spawn" if torch.cuda.is_available() and torch.cuda.is_initialized() else "fork"
    ctx = multiprocessing.get_context(method)
    folder = tempfile.mkdtemp(prefix=f"cs336-job-a{attempt}-")
    outcomes = [RankOutcome(r) for r in range(world_size)]
    procs, conns, grace_end = [], {}, None
    try:
        for r in range(world_size):
            mine, theirs = ctx.Pipe(duplex=False)
            rank_args = (job, args, r, world_size, attempt, folder, fault, backend, group_timeout, theirs)
            p = ctx.Process(target=_rank_main, name=f"rank{r}", args=rank_args, daemon=True)
            p.start()
            theirs.close()
            procs.append(p)
            conns[mine] = r
        store = dist.PrefixStore("job/", dist.FileStore(str(Path(folder) / "store"), world_size))
        end = time.monotonic() + deadline
        running = {p.sentinel: r for r, p in enumerate(procs)}
        by_rank = {r: c for c, r in conns.items()}

        def take_message(r: int) -> None:
            conn = by_rank.pop(r, None)
            if conn is None or not conn.poll():
                return
            try:
                kind, payload = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):
                return  # ended without a message: the sentinel says how
            outcomes[r].reported_at = time.time()
            setattr(outcomes[r], {"ok": "value", "failure": "failure"}.get(kind, "error"), payload)

        killed: set[int] = set()
        while running:
            ready = wait([*by_rank.values(), *running], timeout=max(0.0, end - time.monotonic()))
            if not ready:
                break
            for obj in ready:
                if obj in running:
                    r = running.pop(obj)
                    take_message(r)  # a message sent just before the exit comes first
                    procs[r].join()
                    outcomes[r].exitcode = procs[r].exitcode
                    if outcomes[r].reported_at is None:
                        store.set(f"dead/{r}", str(procs[r].exitcode))  # the scheduler's notice
                else:
                    take_message(next(r for r, c in by_rank.items() if c is obj))
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
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
    return outcomes


def _exit_name(code: int | None) -> str:
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
            lines.append(f"--- rank {o.rank}: ended by {_exit_name(o.exitcode)} without a report"
                         + (f" ({o.error})" if o.error else ""))  # fmt: skip
        else:
            lines.append(f"--- rank {o.rank}: raised\n{o.error.rstrip()}")
        if o.stacks:
            lines.append(f"its Python stack:\n{o.stacks.rstrip()}")
    return "\n".join(lines)


def _stacks_of(proc, path: Path) -> str:
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGCONT)  # a stopped process cannot run its signal handler
        os.kill(proc.pid, signal.SIGUSR1)
    time.sleep(0.3)
    try:
        return path.read_text(errors="replace")[-4000:]
    except OSError:
        return ""


# ---------------------------------------------------------------------------------------------
# Given: the training job (DDP or FSDP from your parts 2-3, checkpoints from your part 10.1-10.3)
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


def train_job(rank: JobRank, config: TrainConfig, start_step: int = 0) -> dict:
    """One rank of the training job, from the committed checkpoint of ``start_step`` (0: from scratch) to
    ``config.steps``. Returns ``{"params": full parameters, "start_step": ..., "losses": [...], "step_ends": [...]}``
    (``step_ends``: when each step's optimizer step was done, ``time.time()``).

    Every wait on the peers is guarded by the detector (``FailureDetector.waiting``), so a failure ends it
    with a ``PeerFailure`` (or, for a hung peer, the detector's thread ends the process with a report)."""

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

    detector = FailureDetector(rank.store, me, world, interval=config.heartbeat_interval,
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


# ---------------------------------------------------------------------------------------------
# ## Task 10.5: failure detection and supervised restart
# ---------------------------------------------------------------------------------------------


class FailureDetector:
    """Heartbeats through ``store`` and a guard around every wait: this rank's view of which peers failed.

    Keys (all in ``store``): this rank writes ``heartbeat/<rank>`` = ``"<count> <step>"`` every ``interval``
    seconds from a daemon thread (and at every ``beat``), ``"stopped"`` on ``stop``. A peer has failed when
    ``dead/<peer>`` exists (the launcher saw its process end without a report: "its process exited with
    <code>") or when its heartbeat has not changed for ``timeout`` seconds of this rank's clock ("no
    heartbeat for <timeout> s"); a stopped peer never fails. Its step is the step in its last heartbeat.

    ``beat(step)`` publishes this rank's progress. ``with waiting(what):`` guards a wait on the peers
    (a collective, a save): if the body raises while a peer has failed (or fails within ``timeout`` of the
    error), a ``PeerFailure`` naming that peer, its step and ``what`` is raised from the error; any other
    error goes through unchanged. If a peer fails while the body is blocked, the thread calls
    ``on_failure(PeerFailure)`` within ``interval`` of noticing (the launcher's ``JobRank.fail`` reports and
    ends the process; default: nothing). ``check()`` raises the ``PeerFailure`` if a peer has failed.
    Use as a context manager (``start``/``stop``). Raises ``ValueError`` for ``interval`` or ``timeout``
    not > 0 or ``interval >= timeout``, before starting.
    """

    def __init__(self, store, rank: int, world_size: int, *, interval: float = 0.05, timeout: float = 1.0,
                 on_failure: Callable[[PeerFailure], None] | None = None) -> None:  # fmt: skip
        raise NotImplementedError("Task 10.5 (failure detection): see handouts/10-failures.md §10.5")

    def start(self) -> FailureDetector:
        """Publish the first heartbeat and start the heartbeat thread; returns ``self``."""
        raise NotImplementedError("Task 10.5 (failure detection): see handouts/10-failures.md §10.5")

    def stop(self) -> None:
        """Stop the thread and mark this rank ``stopped`` (its silence from now on is not a failure)."""
        raise NotImplementedError("Task 10.5 (failure detection): see handouts/10-failures.md §10.5")

    def __enter__(self) -> FailureDetector:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def beat(self, step: int) -> None:
        """This rank is at step ``step``: publish a heartbeat carrying it now."""
        raise NotImplementedError("Task 10.5 (failure detection): see handouts/10-failures.md §10.5")

    def failed_peer(self) -> tuple[int, int | None, str] | None:
        """``(rank, its last step, how it was noticed)`` of the lowest failed peer, or None."""
        raise NotImplementedError("Task 10.5 (failure detection): see handouts/10-failures.md §10.5")

    def check(self, what: str = "nothing (between two waits)") -> None:
        """Raise ``PeerFailure`` (``waiting_for=what``) if a peer has failed."""
        raise NotImplementedError("Task 10.5 (failure detection): see handouts/10-failures.md §10.5")

    @contextlib.contextmanager
    def waiting(self, what: str):
        """Guard a wait on the peers (see the class docstring)."""
        raise NotImplementedError("Task 10.5 (failure detection): see handouts/10-failures.md §10.5")


@dataclass(frozen=True)
class RestartPlan:
    """Where a restart resumes: the committed checkpoint of ``step`` (0: none, from scratch), ``world_size``."""

    step: int
    world_size: int


def plan_restart(directory: str | os.PathLike, *, healthy: int, global_batch: int) -> RestartPlan:
    """The restart after a failure: the newest COMMITTED checkpoint in ``directory`` (``checkpoint.
    latest_checkpoint``: a torn save is skipped; none -> step 0), at the largest world size ``w <= healthy``
    that divides ``global_batch`` (so every rank still takes ``global_batch / w`` rows and the run matches
    an uninterrupted one). Raises ``ValueError`` for ``healthy`` or ``global_batch`` < 1."""
    raise NotImplementedError("Task 10.5 (restart policy): see handouts/10-failures.md §10.5")


@dataclass
class Attempt:
    """One launch: its world size, the step it started from, and how each rank ended."""

    world_size: int
    start_step: int
    outcomes: list[RankOutcome]


@dataclass
class JobHistory:
    """Every attempt of a supervised job, in order; ``result``: the last attempt's values, by rank."""

    attempts: list[Attempt]
    result: list


def supervise(job: Callable, config: TrainConfig, *, world_size: int, spares: int = 0, max_restarts: int = 2,
              fault: FaultPlan | None = None, deadline: float = 60.0, grace: float = 5.0) -> JobHistory:  # fmt: skip
    """Run ``job(JobRank, config, start_step)`` through ``launch`` until an attempt ends ``ok`` on every rank.

    The first attempt starts from ``plan_restart(config.directory, healthy=world_size, ...)`` (a job
    restarted by hand resumes too). After a failed attempt, the failed ranks are those that died without a
    report plus every ``dead_rank`` the survivors' ``PeerFailure``s name; each is replaced by a spare
    while ``spares`` last (a spare is used up), and the next attempt follows ``plan_restart`` with
    ``healthy`` = the attempt's world size minus the failed ranks not replaced. ``fault`` goes to every
    attempt (it names the attempt it fires in). Raises ``RuntimeError`` with every rank's outcome when an
    attempt fails with a rank's own error (a bug, not a failure: restarting would not help) or after
    ``max_restarts`` restarts.
    """
    raise NotImplementedError("Task 10.5 (supervised restart): see handouts/10-failures.md §10.5")


# ---------------------------------------------------------------------------------------------
# ## Task 10.6: live recovery from a healthy replica
# ---------------------------------------------------------------------------------------------


def replica_state(module: nn.Module, optimizer: torch.optim.Optimizer, *, step: int) -> dict[str, Any]:
    """Everything a replica of ``module``/``optimizer`` needs to carry on from step ``step``, by reference.

    Keys: ``"step"`` (int), ``"param/<name>"`` (the parameter's tensor, names as in
    ``module.named_parameters()``), ``"optim/<name>/<key>"`` (every entry of ``optimizer.state`` for that
    parameter: tensors as they are, e.g. AdamW's ``exp_avg``, ``exp_avg_sq`` and ``step``), and
    ``"optim_groups"`` (the param groups' hyperparameters, without ``params``). Nothing is copied, so
    sending it sends the live tensors. The data order and this kit's randomness are functions of the step.
    """
    raise NotImplementedError("Task 10.6 (replica state): see handouts/10-failures.md §10.6")


def load_replica_state(module: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> int:
    """Put ``state`` (from ``replica_state``, possibly received) into ``module`` and ``optimizer``, in place
    for parameters; optimizer state entries are created where missing. Returns ``state["step"]``. Raises
    ``KeyError`` naming the first parameter or optimizer entry ``state`` lacks."""
    raise NotImplementedError("Task 10.6 (replica state): see handouts/10-failures.md §10.6")


def send_replica_state(state: dict[str, Any], *, src: int, dst: int, group: dist.ProcessGroup | None = None) -> dict:
    """Copy ``state`` from global rank ``src`` to global rank ``dst`` of ``group``, point to point.

    ``src`` sends a header (the keys, each tensor's shape and dtype, the non-tensor values: pickled into
    a uint8 tensor, its length sent first as one int64) and then every tensor, in key order, with
    ``dist.send``; ``dst`` receives them with ``dist.recv``, into its own tensor of the same key when shape
    and dtype match (in place), into a new one on that device otherwise, and returns the received dict
    (same keys as ``src``'s). Bytes on the wire: the tensors' bytes plus the header. Every other rank
    returns ``state`` untouched without communicating; ``src`` returns ``state``. Tensors travel on the
    device of ``state``'s tensors (the rank's device). Raises ``ValueError`` if ``src == dst`` or either is
    not in ``group``, before communicating.
    """
    raise NotImplementedError("Task 10.6 (state transfer): see handouts/10-failures.md §10.6")


def recover_replica(module: nn.Module, optimizer: torch.optim.Optimizer, step: int, *, replaced: int,
                    group: dist.ProcessGroup | None = None) -> int:  # fmt: skip
    """Live recovery: global rank ``replaced`` of ``group`` (the replicas, e.g. the DDP world or an HSDP
    replicate group) has just been replaced and holds garbage; it gets ``replica_state`` from a healthy
    replica (the next rank of ``group`` after ``replaced``, cyclically) and loads it. Every rank of
    ``group`` calls it; ranks other than the two never communicate and keep their state untouched.
    Returns the step every replica is at (the healthy one's ``step``; the replaced rank's own ``step``
    argument is ignored). At group size 1 there is no healthy replica: ``ValueError``.
    """
    raise NotImplementedError("Task 10.6 (live recovery): see handouts/10-failures.md §10.6")
