"""Failures at scale, part 2: a killed rank, a restart, and live recovery (handouts/10-failures.md §10.5-§10.6).

A job of N rank processes loses one of them: SIGKILL, the out-of-memory killer, a GPU that stops answering.
The others must not hang: they notice within a deadline and say which rank failed, at which step, and what
they were waiting for. Then the job goes on, either by restarting every rank from the last committed
checkpoint (at the same world size with a spare, or at a smaller one through resharding: Task 10.5), or,
with replicas (DDP, HSDP), by handing a replacement the state of a healthy replica over the network while
the others keep theirs (torchft's live recovery: Task 10.6).

Prerequisites, per task:
  Task 10.5 needs Task 10.1 (``checkpoint.save_checkpoint``, ``latest_checkpoint``: ``plan_restart`` reads the
      newest committed step, and its unit test saves checkpoints) and Task 10.2 (``load_checkpoint``: a
      restart resumes through it, resharded when the world shrinks); Tasks 10.3-10.4 are not used. The job
      trains with ``ddp.all_reduce_gradients_flat`` (Task 2.2) and ``fsdp.FSDP`` (Task 3.3): yours in the
      full kit, given code in a kit without parts 2-3.
  Task 10.6 needs ``ddp.all_reduce_gradients_flat`` (Task 2.2) only: its test trains DDP around the recovery.

Design note (what is given, what you write, and why)
----------------------------------------------------
Given, in ``cs336_systems/launcher.py`` (read it first: the tests and the benchmark run it; this file
re-exports its names, so ``fault_tolerance.launch`` works): ``launch`` forks the ranks of one attempt, each
with a ``JobRank`` (its place, its store, ``reached(step, point)`` where a test's ``FaultPlan`` kills it),
and returns one ``RankOutcome`` per rank; ``PeerFailure`` is what a survivor raises; ``run_training`` is the
training job, and ``train_job`` below runs it on your parts and your ``FailureDetector``.
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
import os
import pickle
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from cs336_systems import launcher
from cs336_systems.launcher import (
    FaultPlan,
    JobRank,
    PeerFailure,
    RankOutcome,
    TrainConfig,
    batch,
    build_model,
    describe_outcomes,
    init_adamw_state,
    launch,
    make_optimizer,
)

# Imported here so that forked ranks inherit them: checkpoint (Tasks 10.1-10.2), ddp (2.2) and fsdp (3.3).
from . import checkpoint, ddp, fsdp

__all__ = [
    # given (cs336_systems/launcher.py), re-exported
    "FaultPlan",
    "PeerFailure",
    "JobRank",
    "RankOutcome",
    "launch",
    "describe_outcomes",
    "TrainConfig",
    "build_model",
    "batch",
    "make_optimizer",
    "init_adamw_state",
    "train_job",
    # yours
    "FailureDetector",
    "RestartPlan",
    "plan_restart",
    "Attempt",
    "JobHistory",
    "supervise",
    "replica_state",
    "load_replica_state",
    "send_replica_state",
    "recover_replica",
]


def train_job(rank: JobRank, config: TrainConfig, start_step: int = 0) -> dict:
    """Given: the training job the tests and the benchmark run (``launcher.run_training``) on this package's
    ``checkpoint``, ``ddp`` and ``fsdp`` and on ``FailureDetector`` below. A module-level function, so a
    spawned rank (CUDA) finds it by name."""
    return launcher.run_training(rank, config, start_step, checkpoint=checkpoint, ddp=ddp, fsdp=fsdp,
                                 detector=FailureDetector)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# ## Task 10.5: failure detection and supervised restart
# ---------------------------------------------------------------------------------------------


class FailureDetector:
    """Heartbeats through ``store`` and a guard around every wait: this rank's view of which peers failed.

    Keys (all in ``store``): this rank writes ``heartbeat/<rank>`` = ``"<count> <step>"`` every ``interval``
    seconds from a daemon thread (and at every ``beat``), ``"stopped"`` on ``stop``. A peer has failed when
    ``dead/<peer>`` exists (the launcher saw its process end without a report: "its process exited with
    <code>") or when its heartbeat has not changed for ``timeout`` seconds of this rank's clock ("no
    heartbeat for <timeout> s"); a stopped peer never fails. Its step is the step in its last heartbeat
    (None before its first ``beat``: a heartbeat then reads ``"<count> None"``). A peer never seen at all
    fails too: its ``timeout`` runs from this detector's ``start``.

    ``beat(step)`` publishes this rank's progress. ``with waiting(what):`` guards a wait on the peers
    (a collective, a save): if the body raises while a peer has failed (or fails within ``timeout`` of the
    error), a ``PeerFailure`` naming that peer, its step and ``what`` is raised from the error; any other
    error goes through unchanged. If a peer fails while the body is blocked, the thread calls
    ``on_failure(PeerFailure)`` within ``interval`` of noticing (the launcher's ``JobRank.fail`` reports and
    ends the process; default: nothing): only while the main thread is inside ``waiting`` (a rank between two
    waits must not be ended where it stands), and once per failure (the first call reports; a wait that
    starts after a peer failed is ended by the thread's next beat at the latest). ``check()`` raises the
    ``PeerFailure`` if a peer has failed.
    Use as a context manager (``start``/``stop``). Raises ``ValueError`` for ``interval`` or ``timeout``
    not > 0 or ``interval >= timeout``, before starting.
    """

    def __init__(self, store, rank: int, world_size: int, *, interval: float = 0.05, timeout: float = 1.0,
                 on_failure: Callable[[PeerFailure], None] | None = None) -> None:  # fmt: skip
        # BEGIN SOLUTION: Task 10.5 (failure detection)
        if not (interval > 0 and timeout > 0 and interval < timeout):
            raise ValueError(f"need 0 < interval < timeout, got interval={interval!r}, timeout={timeout!r}")
        self.store, self.rank, self.world_size = store, rank, world_size
        self.interval, self.timeout, self.on_failure = interval, timeout, on_failure
        self._lock = threading.Lock()  # the store is shared by this thread and the heartbeat thread
        self._count, self._step = 0, None
        self._seen: dict[int, tuple[str | None, float]] = {}  # peer -> (last heartbeat, when it changed, my clock)
        self._waiting_for: str | None = None  # what the main thread waits for, while it does
        self._reported = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # END SOLUTION

    def start(self) -> FailureDetector:
        """Publish the first heartbeat and start the heartbeat thread; returns ``self``."""
        # BEGIN SOLUTION: Task 10.5 (failure detection)
        self._publish()
        now = time.monotonic()
        self._seen = {peer: (None, now) for peer in range(self.world_size) if peer != self.rank}
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-rank{self.rank}", daemon=True)
        self._thread.start()
        return self
        # END SOLUTION

    def stop(self) -> None:
        """Stop the thread and mark this rank ``stopped`` (its silence from now on is not a failure)."""
        # BEGIN SOLUTION: Task 10.5 (failure detection)
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            self.store.set(f"heartbeat/{self.rank}", "stopped")
        # END SOLUTION

    def __enter__(self) -> FailureDetector:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def beat(self, step: int) -> None:
        """This rank is at step ``step``: publish a heartbeat carrying it now."""
        # BEGIN SOLUTION: Task 10.5 (failure detection)
        self._step = step
        self._publish()
        # END SOLUTION

    def failed_peer(self) -> tuple[int, int | None, str] | None:
        """``(rank, its last step, how it was noticed)`` of the lowest failed peer, or None."""
        # BEGIN SOLUTION: Task 10.5 (failure detection)
        now = time.monotonic()
        for peer in sorted(self._seen):
            with self._lock:
                dead = self.store.check([f"dead/{peer}"])
                code = self.store.get(f"dead/{peer}").decode() if dead else None
                key = f"heartbeat/{peer}"
                beat = self.store.get(key).decode() if self.store.check([key]) else None
            if beat == "stopped":
                continue
            step = int(beat.split()[1]) if beat and beat.split()[1] != "None" else None
            if dead:
                return peer, step, f"its process exited with {launcher.exit_name(int(code))}"
            last, since = self._seen[peer]
            if beat != last:
                self._seen[peer] = (beat, now)
            elif now - since > self.timeout:
                return peer, step, f"no heartbeat for {self.timeout:g} s"
        return None
        # END SOLUTION

    def check(self, what: str = "nothing (between two waits)") -> None:
        """Raise ``PeerFailure`` (``waiting_for=what``) if a peer has failed."""
        # BEGIN SOLUTION: Task 10.5 (failure detection)
        found = self.failed_peer()
        if found is not None:
            raise PeerFailure(self.rank, *found[:2], what, found[2])
        # END SOLUTION

    @contextlib.contextmanager
    def waiting(self, what: str):
        """Guard a wait on the peers (see the class docstring)."""
        # BEGIN SOLUTION: Task 10.5 (failure detection)
        self.check(what)
        self._waiting_for = what
        try:
            yield
        except PeerFailure:
            raise
        except Exception as error:
            # gloo's "Connection closed by peer" may arrive before the launcher's notice: wait for it a while.
            give_up = time.monotonic() + self.timeout + 2 * self.interval
            while (found := self.failed_peer()) is None and time.monotonic() < give_up:
                time.sleep(self.interval / 2)
            if found is None:
                raise
            raise PeerFailure(self.rank, found[0], found[1], what, found[2]) from error
        finally:
            self._waiting_for = None
        # END SOLUTION

    # BEGIN SOLUTION
    def _publish(self) -> None:
        with self._lock:
            self._count += 1
            self.store.set(f"heartbeat/{self.rank}", f"{self._count} {self._step}")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._publish()
            found = self.failed_peer()
            what = self._waiting_for
            if found is not None and what is not None and not self._reported and self.on_failure is not None:
                self._reported = True  # the main thread is blocked on a failed peer: only ending it helps
                self.on_failure(PeerFailure(self.rank, found[0], found[1], what, found[2]))

    # END SOLUTION


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
    # BEGIN SOLUTION: Task 10.5 (restart policy)
    for name, value in (("healthy", healthy), ("global_batch", global_batch)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    world = next(w for w in range(healthy, 0, -1) if global_batch % w == 0)
    return RestartPlan(step=checkpoint.latest_checkpoint(directory) or 0, world_size=world)
    # END SOLUTION


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
    report (a survivor the launcher killed at its deadline or grace period counts: it died without one)
    plus every ``dead_rank`` the survivors' ``PeerFailure``s name, each rank once; each is replaced by a spare
    while ``spares`` last (a spare is used up), and the next attempt follows ``plan_restart`` with
    ``healthy`` = the attempt's world size minus the failed ranks not replaced. ``fault`` goes to every
    attempt (it names the attempt it fires in). Raises ``RuntimeError`` with every rank's outcome when an
    attempt fails with a rank's own error (a bug, not a failure: restarting would not help) or after
    ``max_restarts`` restarts.
    """
    # BEGIN SOLUTION: Task 10.5 (supervised restart)
    plan = plan_restart(config.directory, healthy=world_size, global_batch=config.global_batch)
    attempts: list[Attempt] = []
    for attempt in range(max_restarts + 1):
        outcomes = launch(job, plan.world_size, config, plan.step, attempt=attempt, fault=fault,
                          deadline=deadline, grace=grace)  # fmt: skip
        attempts.append(Attempt(plan.world_size, plan.step, outcomes))
        if all(o.ok for o in outcomes):
            return JobHistory(attempts, [o.value for o in outcomes])
        bugs = [o for o in outcomes if o.error is not None and not o.died]
        if bugs:
            raise RuntimeError(f"attempt {attempt} failed with an error, not a lost rank (a restart would not "
                               f"help):\n{describe_outcomes(outcomes)}")  # fmt: skip
        failed = {o.rank for o in outcomes if o.died} | {o.failure.dead_rank for o in outcomes if o.failure}
        replaced = min(spares, len(failed))
        spares -= replaced
        healthy = plan.world_size - len(failed) + replaced
        if healthy < 1:
            raise RuntimeError(f"attempt {attempt} left no healthy rank:\n{describe_outcomes(outcomes)}")
        plan = plan_restart(config.directory, healthy=healthy, global_batch=config.global_batch)
    raise RuntimeError(f"gave up after {max_restarts} restarts; the last attempt:\n{describe_outcomes(outcomes)}")
    # END SOLUTION


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
    # BEGIN SOLUTION: Task 10.6 (replica state)
    names = {id(p): name for name, p in module.named_parameters()}
    state: dict[str, Any] = {"step": int(step)}
    for name, p in module.named_parameters():
        state[f"param/{name}"] = p.data
    for group in optimizer.param_groups:
        for p in group["params"]:
            for key, value in optimizer.state.get(p, {}).items():
                state[f"optim/{names[id(p)]}/{key}"] = value
    state["optim_groups"] = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    return state
    # END SOLUTION


def load_replica_state(module: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> int:
    """Put ``state`` (from ``replica_state``, possibly received) into ``module`` and ``optimizer``, in place
    for parameters; optimizer state entries are created where missing (a 0-dim tensor, AdamW's ``step``, on
    the CPU as AdamW keeps it; any other tensor on its parameter's device). ``"optim_groups"`` is optional:
    when present, each param group's hyperparameters are updated from it. Returns ``state["step"]``. Raises
    ``KeyError`` naming the first parameter or optimizer entry ``state`` lacks."""
    # BEGIN SOLUTION: Task 10.6 (replica state)
    names = {id(p): name for name, p in module.named_parameters()}
    with torch.no_grad():
        for name, p in module.named_parameters():
            if f"param/{name}" not in state:
                raise KeyError(f"state has no 'param/{name}'")
            p.copy_(state[f"param/{name}"])
        for group in optimizer.param_groups:
            for p in group["params"]:
                prefix = f"optim/{names[id(p)]}/"
                mine = optimizer.state[p]
                for key in mine:
                    if prefix + key not in state:
                        raise KeyError(f"state has no '{prefix}{key}'")
                for key, value in state.items():
                    if not key.startswith(prefix):
                        continue
                    entry = key[len(prefix) :]
                    if isinstance(value, torch.Tensor) and isinstance(mine.get(entry), torch.Tensor):
                        mine[entry].copy_(value)
                    elif isinstance(value, torch.Tensor):  # AdamW keeps ``step`` on the CPU, the rest with p
                        mine[entry] = value.to(p.device if value.dim() else "cpu", copy=True)
                    else:
                        mine[entry] = value
    for group, saved in zip(optimizer.param_groups, state.get("optim_groups", [])):
        group.update(saved)
    return int(state["step"])
    # END SOLUTION


# BEGIN SOLUTION
def _wire_device(state: dict, group) -> torch.device:
    """The rank's device: where ``state``'s tensors live (AdamW's ``step`` aside, on the CPU), else the backend's."""
    for v in state.values():
        if isinstance(v, torch.Tensor) and v.device.type != "cpu":
            return v.device
    return (
        torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(group) == "nccl" else torch.device("cpu")
    )


# END SOLUTION


def send_replica_state(state: dict[str, Any], *, src: int, dst: int, group: dist.ProcessGroup | None = None) -> dict:
    """Copy ``state`` from global rank ``src`` to global rank ``dst`` of ``group``, point to point.

    ``src`` sends a header (the keys, each tensor's shape and dtype, the non-tensor values: pickled into
    a uint8 tensor, its length sent first as one int64) and then every tensor, in key order, with
    ``dist.send`` (key order: ``sorted`` over the keys, the order of the header's list); ``dst`` receives
    them with ``dist.recv``, into its own tensor of the same key when shape
    and dtype match (in place), into a new one on that device otherwise, and returns the received dict
    (same keys as ``src``'s). Bytes on the wire: the tensors' bytes plus the header. Every other rank
    returns ``state`` untouched without communicating; ``src`` returns ``state``. Tensors travel on the
    device of ``state``'s tensors (the rank's device). Raises ``ValueError`` if ``src == dst`` or either is
    not in ``group``, before communicating.
    """
    # BEGIN SOLUTION: Task 10.6 (state transfer)
    ranks = dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)
    for name, r in (("src", src), ("dst", dst)):
        if r not in ranks:
            raise ValueError(f"{name} ({r}) is not a rank of group {ranks}")
    if src == dst:
        raise ValueError(f"src and dst must differ, both are {src}")
    me = dist.get_rank()
    if me not in (src, dst):
        return state
    device = _wire_device(state, group)
    if me == src:
        tensors = sorted((k, v) for k, v in state.items() if isinstance(v, torch.Tensor))
        header = {"tensors": [(k, tuple(v.shape), v.dtype) for k, v in tensors],
                  "values": {k: v for k, v in state.items() if not isinstance(v, torch.Tensor)}}  # fmt: skip
        blob = torch.frombuffer(bytearray(pickle.dumps(header)), dtype=torch.uint8).to(device)
        dist.send(torch.tensor([blob.numel()], dtype=torch.int64, device=device), dst, group=group)
        dist.send(blob, dst, group=group)
        for _, t in tensors:
            if t.numel():
                dist.send(t.detach().to(device).contiguous(), dst, group=group)
        return state
    size = torch.empty(1, dtype=torch.int64, device=device)
    dist.recv(size, src, group=group)
    blob = torch.empty(int(size.item()), dtype=torch.uint8, device=device)
    dist.recv(blob, src, group=group)
    header = pickle.loads(blob.cpu().numpy().tobytes())
    received = dict(header["values"])
    for key, shape, dtype in header["tensors"]:
        mine = state.get(key)
        fits = isinstance(mine, torch.Tensor) and tuple(mine.shape) == shape and mine.dtype == dtype
        into = mine if fits and mine.device == device and mine.is_contiguous() else None
        buf = into if into is not None else torch.empty(shape, dtype=dtype, device=device)
        if buf.numel():
            dist.recv(buf, src, group=group)
        if fits and into is None:
            mine.copy_(buf)
            buf = mine
        received[key] = buf
    return received
    # END SOLUTION


def recover_replica(module: nn.Module, optimizer: torch.optim.Optimizer, step: int, *, replaced: int,
                    group: dist.ProcessGroup | None = None) -> int:  # fmt: skip
    """Live recovery: global rank ``replaced`` of ``group`` (the replicas, e.g. the DDP world or an HSDP
    replicate group) has just been replaced and holds garbage; it gets ``replica_state`` from a healthy
    replica (the next rank of ``group`` after ``replaced``, cyclically) and loads it. Every rank of
    ``group`` calls it; ranks other than the two never communicate and keep their state untouched.
    Returns the step every replica is at (the healthy one's ``step``; the replaced rank's own ``step``
    argument is ignored). At group size 1 there is no healthy replica: ``ValueError``.
    """
    # BEGIN SOLUTION: Task 10.6 (live recovery)
    ranks = dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)
    if replaced not in ranks:
        raise ValueError(f"replaced ({replaced}) is not a rank of group {ranks}")
    if len(ranks) == 1:
        raise ValueError("a group of one rank has no healthy replica to recover from")
    healthy = ranks[(ranks.index(replaced) + 1) % len(ranks)]
    me = dist.get_rank()
    if me not in (healthy, replaced):
        return step
    received = send_replica_state(replica_state(module, optimizer, step=step), src=healthy, dst=replaced, group=group)
    return load_replica_state(module, optimizer, received) if me == replaced else step
    # END SOLUTION
