"""A communication recorder for use inside ranks: which torch.distributed calls did this code make?

    with CommRecorder() as rec:
        ddp_model(x).sum().backward()
        ddp_model.finish_gradient_synchronization()
    return rec.events            # plain dataclasses: send them to the parent and judge there

It records at the lowest Python-visible level, the methods of ``ProcessGroup`` (every
torch.distributed function, and anything calling a process group directly, ends there), and the
``wait`` of every ``Work`` handle. Each event names the public function that made the call
(``all_reduce``, ``isend``, ...; ``pg.allreduce`` when code bypassed torch.distributed), the peer
as a global rank, sizes, dtype, whether the call returned a pending handle (async), and whether it
happened while autograd was running backward. Waits are events too (``op="wait"``, ``waits_for``
= the index of the call whose handle was waited on), so tests can tell overlap from blocking.
"""

from __future__ import annotations

import os
import shlex
import sys
import threading
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup, Work

from tests.harness import trace as _trace

# ProcessGroup methods that move data, and the group-rank argument position of the peer (p2p).
_PG_METHODS = [
    "allreduce", "allreduce_coalesced", "allgather", "allgather_coalesced", "_allgather_base",
    "allgather_into_tensor_coalesced", "all_gather_single", "reduce", "reduce_scatter",
    "_reduce_scatter_base", "reduce_scatter_tensor_coalesced", "reduce_scatter_single", "broadcast",
    "alltoall", "alltoall_base", "all_to_all_single", "barrier", "monitored_barrier", "gather",
    "scatter", "send", "recv", "recv_anysource",
]  # fmt: skip
POINT_TO_POINT = frozenset({"send", "recv", "isend", "irecv"})
# Public functions that run through ProcessGroup.send/recv but are not collectives.
_PUBLIC_NAMES = {
    "send", "recv", "isend", "irecv", "batch_isend_irecv", "broadcast", "all_reduce", "reduce",
    "all_gather", "all_gather_into_tensor", "_all_gather_base", "all_gather_object", "reduce_scatter",
    "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all", "all_to_all_single", "barrier",
    "monitored_barrier", "gather", "scatter", "broadcast_object_list", "gather_object",
    "scatter_object_list", "all_gather_coalesced", "all_reduce_coalesced", "send_object_list",
    "recv_object_list",
}  # fmt: skip


@dataclass(frozen=True)
class CommEvent:
    index: int
    op: str  # public torch.distributed name ("isend", "all_reduce"...), "pg.<method>" or "wait"
    peer: int | None  # global rank of the other side of a send/recv, else None
    group_ranks: tuple[int, ...]  # global ranks of the group the call went to
    numel: int  # elements this rank contributed (send, collective input) or received (recv)
    nbytes: int
    dtype: str | None
    shapes: tuple[tuple[int, ...], ...]
    async_op: bool  # the caller got a handle back instead of a completed call
    in_backward: bool  # made while autograd ran a backward pass (e.g. from a grad hook)
    time: float  # perf_counter() at the call
    waits_for: int | None = None  # for op == "wait": index of the event whose handle this waited on

    @property
    def is_p2p(self) -> bool:
        return self.op in POINT_TO_POINT

    @property
    def is_collective(self) -> bool:
        return self.op != "wait" and not self.is_p2p


def in_backward() -> bool:
    """True while the autograd engine runs a backward pass on this thread."""
    return torch._C._current_graph_task_id() != -1


def _flat_tensors(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _flat_tensors(o)]
    return []


@dataclass
class CommRecorder:
    """Context manager recording this process's communication (see the module docstring)."""

    events: list[CommEvent] = field(default_factory=list)
    _saved: dict = field(default_factory=dict, repr=False)
    _handles: dict = field(default_factory=dict, repr=False)
    _works: list = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __enter__(self) -> CommRecorder:
        # Save the raw class attributes (pybind11 ``instancemethod`` descriptors): ``getattr`` would
        # return the unbound builtin, which no longer binds ``self`` once put back on the class.
        for owner, name, wrap in [(ProcessGroup, m, self._wrap_pg) for m in _PG_METHODS] + [(Work, "wait", None)]:
            if name not in vars(owner):
                continue
            self._saved[(owner, name)] = vars(owner)[name]
            original = getattr(owner, name)
            setattr(owner, name, wrap(name, original) if wrap else self._wrap_wait(original))
        if _trace.TRACE_DIR:  # CS336_TRACE=DIR: see tests/harness/trace.py
            self._started = time.perf_counter()
            self._label = f"recorded in {sys._getframe(1).f_code.co_name}"  # the rank function that records
        return self

    def __exit__(self, *exc) -> None:
        for (owner, name), original in self._saved.items():
            setattr(owner, name, original)
        if _trace.TRACE_DIR:
            _trace.write_rank_trace(self.events, getattr(self, "_started", 0.0), time.perf_counter(),
                                    label=getattr(self, "_label", "recorded"))  # fmt: skip
        self._saved.clear()
        self._handles.clear()
        self._works.clear()

    # -- queries used by tests (they also work on the parent side, on ``events`` lists) --------

    def calls(self) -> list[CommEvent]:
        return calls(self.events)

    # -- wrappers ------------------------------------------------------------------------------

    def _wrap_pg(self, method: str, original):
        recorder = self

        def wrapper(pg, *args, **kwargs):
            work = original(pg, *args, **kwargs)
            recorder._record(method, pg, args, work, sys._getframe(1))
            return work

        wrapper.__name__ = method
        return wrapper

    def _wrap_wait(self, original):
        recorder = self

        def wait(work, *args, **kwargs):
            result = original(work, *args, **kwargs)
            target = recorder._handles.get(id(work))
            # torch's own blocking calls (send, recv, all_reduce without async_op) wait on their
            # handle themselves; those waits are part of the call, not events of their own.
            if target is not None and recorder.events[target].async_op:
                with recorder._lock:
                    recorder.events.append(
                        CommEvent(len(recorder.events), "wait", None, (), 0, 0, None, (), False,
                                  in_backward(), time.perf_counter(), waits_for=target)
                    )  # fmt: skip
            return result

        return wait

    def _record(self, method: str, pg, args, work, caller) -> None:
        op, async_op = _public_caller(caller)
        if op is None:
            op, async_op = f"pg.{method}", True
        ranks = tuple(dist.get_process_group_ranks(pg))
        peer = None
        if method in ("send", "recv") and len(args) >= 2:
            peer = ranks[int(args[1])]
        tensors = _flat_tensors(args[0] if args else [])
        if method in ("allgather", "_allgather_base", "allgather_into_tensor_coalesced", "all_gather_single"):
            tensors = _flat_tensors(args[1] if len(args) > 1 else [])  # this rank's input
        elif method in ("reduce_scatter", "_reduce_scatter_base", "reduce_scatter_single"):
            tensors = _flat_tensors(args[1] if len(args) > 1 else [])
        elif method in ("alltoall_base", "all_to_all_single", "alltoall"):
            tensors = _flat_tensors(args[1] if len(args) > 1 else [])
        numel = sum(t.numel() for t in tensors)
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        dtype = str(tensors[0].dtype).replace("torch.", "") if tensors else None
        with self._lock:
            index = len(self.events)
            self.events.append(
                CommEvent(index, op, peer, ranks, numel, nbytes, dtype, tuple(tuple(t.shape) for t in tensors),
                          async_op, in_backward(), time.perf_counter())
            )  # fmt: skip
            if isinstance(work, Work):
                self._handles[id(work)] = index
                self._works.append(work)  # keep handles alive so their ids stay unique while recording


def _public_caller(frame) -> tuple[str | None, bool]:
    """The outermost torch.distributed function on the stack, and whether it was asked to be async.

    ``send`` is built on ``isend`` in recent torch, so the outermost name is the one the user
    called; ``batch_isend_irecv`` is the exception: its parts are recorded as isend/irecv.
    """
    chain = []
    while frame is not None and frame.f_globals.get("__name__", "").startswith("torch.distributed"):
        if frame.f_code.co_name in _PUBLIC_NAMES:
            chain.append(frame)
        frame = frame.f_back
    if not chain:
        return None, True
    names = [f.f_code.co_name for f in chain]
    if "batch_isend_irecv" in names:
        return names[names.index("batch_isend_irecv") - 1], True
    outer = chain[-1]
    name = outer.f_code.co_name
    return name, name in ("isend", "irecv") or bool(outer.f_locals.get("async_op", False))


def calls(events: list[CommEvent]) -> list[CommEvent]:
    """The communication calls, without the waits."""
    return [e for e in events if e.op != "wait"]


def bytes_sent(events: list[CommEvent]) -> int:
    """Bytes this rank handed to send/isend (the quantity the ring's 2(N-1)/N·M bound is about)."""
    return sum(e.nbytes for e in events if e.op in ("send", "isend"))


def collective_ops(events: list[CommEvent]) -> list[CommEvent]:
    """Calls that are not point-to-point (built-in collectives or direct process-group use)."""
    return [e for e in events if e.is_collective]


def format_events(events: list[CommEvent], limit: int = 40) -> str:
    """A readable log, one line per event, for failure messages."""
    lines = []
    for e in events[:limit]:
        if e.op == "wait":
            lines.append(f"  #{e.index:<3} wait for #{e.waits_for}{' (in backward)' if e.in_backward else ''}")
            continue
        peer = f" peer={e.peer}" if e.peer is not None else ""
        flags = (" async" if e.async_op else "") + (" in-backward" if e.in_backward else "")
        lines.append(f"  #{e.index:<3} {e.op}{peer} group={list(e.group_ranks)} {e.numel}x{e.dtype}{flags}")
    if len(events) > limit:
        lines.append(f"  ... {len(events) - limit} more")
    where = os.environ.get("CS336_TRACE")  # the parent reads it now: --comm-trace sets it after import
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
    if where and test:
        path = _trace.trace_file_of(where, test)
        lines.append(
            f"  (every rank's timeline of these calls: {path}; python -m scripts.tools.trace {shlex.quote(str(path))})"
        )
    else:
        lines.append("  (for a timeline of these calls rerun with --comm-trace DIR; see tests/harness/trace.py)")
    return "\n".join(lines)
