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
    report (a survivor the launcher killed at its deadline or grace period counts: it died without one)
    plus every ``dead_rank`` the survivors' ``PeerFailure``s name, each rank once; each is replaced by a spare
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
    for parameters; optimizer state entries are created where missing (a 0-dim tensor, AdamW's ``step``, on
    the CPU as AdamW keeps it; any other tensor on its parameter's device). ``"optim_groups"`` is optional:
    when present, each param group's hyperparameters are updated from it. Returns ``state["step"]``. Raises
    ``KeyError`` naming the first parameter or optimizer entry ``state`` lacks."""
    raise NotImplementedError("Task 10.6 (replica state): see handouts/10-failures.md §10.6")


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
