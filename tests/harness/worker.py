"""One rank of a reusable worker pool (the child side of ``tests/harness/pool.py``).

Started by the parent as ``python -m tests.harness.worker`` with its rank, the world size, the
rendezvous file and an inherited socket (``--fd``) that carries the messages of ``protocol.py``.

The default process group outlives a task: when the parent says ``fresh_group`` (the first task,
and after any task that did not end ``ok`` with the group kept on every rank) the rank destroys
it and joins a new one under a ``PrefixStore`` of its own on the one ``FileStore``, so messages
left in flight by a failed test can never reach the next one; otherwise it runs the task on the
group the previous test left. The rank's stdout/stderr go to a log file and its Python stacks (on
SIGUSR1, or on a crash) to a stack file, both truncated at every task so the parent shows what
this test did.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import os
import pickle
import resource
import signal
import sys
import traceback
from multiprocessing.connection import Connection

from tests.harness import defaults
from tests.harness.context import RankContext
from tests.harness.limits import cap, die_with_parent
from tests.harness.protocol import Status, reply


def _limit_resources() -> None:
    """Caps requested by the grader through the environment (0 or unset = no cap)."""
    log_mb = int(os.environ.get(defaults.ENV_WORKER_LOG_LIMIT_MB, "0"))
    if log_mb:
        # A write past the cap fails with EFBIG instead of killing the rank with SIGXFSZ.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        cap(resource.RLIMIT_FSIZE, log_mb << 20)
    mem_mb = int(os.environ.get(defaults.ENV_WORKER_MEMORY_LIMIT_MB, "0"))
    if mem_mb:
        cap(resource.RLIMIT_AS, mem_mb << 20)


def _to_cpu(value):
    """Detach tensors and move them to CPU so results pickle by value, whatever the device."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_cpu(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_to_cpu(v) for v in value)
    return value


def to_device(value, device, _moved=None):
    """The parent's tensors in ``value`` (nested in dicts, lists and tuples, named ones included) on the rank's
    ``device``, as ``_to_cpu`` brings results back: a test can never feed a CPU tensor to a model on ``cuda:r``
    under NCCL. A tensor passed twice stays one tensor. On the CPU the tensors are the same objects (no copy)."""
    import torch

    moved = {} if _moved is None else _moved
    if isinstance(value, torch.Tensor):
        if value.device == device:
            return value
        if id(value) not in moved:
            moved[id(value)] = value.detach().to(device).requires_grad_(value.requires_grad)
        return moved[id(value)]
    if isinstance(value, dict):
        return {k: to_device(v, device, moved) for k, v in value.items()}
    if isinstance(value, list):
        return [to_device(v, device, moved) for v in value]
    if isinstance(value, tuple):
        items = [to_device(v, device, moved) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return value


def _truncate(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)


class _Rank:
    """This process's rank: its device, the rendezvous store and the default group it made."""

    def __init__(self, args: argparse.Namespace, store) -> None:
        self.rank, self.world_size, self.store = args.rank, args.world_size, store
        self.group = None  # the default process group this rank made, while a test may use it

    def join_fresh_group(self, task: int, backend: str, device) -> None:
        import torch.distributed as dist

        # The previous group is destroyed only now, when the parent has heard from every rank:
        # destroying it at the end of a task would turn a peer's hang into a confusing "connection
        # closed" error instead of a stack showing where it waits.
        if dist.is_initialized():
            dist.destroy_process_group()
        init_kwargs = {"device_id": device} if device.type == "cuda" else {}
        task_store = dist.PrefixStore(f"task{task}/", self.store)
        dist.init_process_group(backend, store=task_store, rank=self.rank, world_size=self.world_size, **init_kwargs)
        self.group = dist.group.WORLD

    def group_kept(self) -> bool:
        """The task left the default group as it found it: still initialized, the same object, no
        subgroups (a test that made subgroups, or destroyed or replaced the group, gets a fresh one)."""
        import torch.distributed as dist
        from torch.distributed import distributed_c10d

        return dist.is_initialized() and dist.group.WORLD is self.group and len(distributed_c10d._world.pg_map) == 1

    def run(self, msg: dict) -> dict:
        import torch

        backend = msg["backend"]
        device = torch.device(f"cuda:{self.rank}") if backend == "nccl" else torch.device("cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        if msg["fresh_group"]:
            self.join_fresh_group(msg["task"], backend, device)
        torch.manual_seed(self.rank)  # every test starts from the same per-rank random state
        # Device-faithful on gloo: the rank's tensors stand for ones on its GPU, and ctx.device says so.
        stand_in = torch.device("cuda", self.rank) if msg.get("device_faithful") and device.type == "cpu" else None
        ctx = RankContext(rank=self.rank, world_size=self.world_size, backend=backend, device=stand_in or device,
                          impl=msg["impl"],
                          unimportable=tuple(msg.get("unimportable", ())),
                          hung_functions=msg.get("hung_functions"))  # fmt: skip
        with contextlib.ExitStack() as modes:
            if msg.get("device_faithful"):  # CPU tensors followed as on a GPU (tests/harness/device_faithful.py)
                from tests.harness.device_faithful import DeviceFaithfulMode

                modes.enter_context(DeviceFaithfulMode(impl=msg["impl"], device=device, stand_in=stand_in))
            if msg.get("p2p_matching") == "tag-blind" and backend == "gloo":  # NCCL's rule (p2p_matching.py)
                from tests.harness.p2p_matching import TagBlindMatching

                store = torch.distributed.PrefixStore(f"p2p{msg['task']}/", self.store)
                modes.enter_context(TagBlindMatching(store, self.rank))
            args, kwargs = to_device((list(msg["args"]), msg["kwargs"]), device)
            value = msg["fn"](ctx, *args, **kwargs)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return reply(msg["task"], Status.OK, value=_to_cpu(value), group_kept=self.group_kept())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--stacks", required=True)
    args = parser.parse_args()

    die_with_parent()  # no rank outlives a killed pytest
    # Everything the rank prints goes to its own log file, never into the parent's stdout.
    log_fd = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    stacks = open(args.stacks, "a")  # noqa: SIM115 - held open for faulthandler
    faulthandler.enable(file=stacks, all_threads=True)  # crashes (segfault, abort)
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True, chain=False)  # hangs
    _limit_resources()

    conn = Connection(args.fd)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # ranks share few cores; oversubscription makes tests slow and flaky
    # The first optimizer a process builds imports torch._dynamo (~1.7 s idle, many more on a loaded
    # machine). Paid here, before the pool is ready, it can no longer push a test past its deadline.
    import torch._dynamo  # noqa: F401

    rank = _Rank(args, dist.FileStore(args.store, args.world_size))
    conn.send_bytes(pickle.dumps(reply(None, Status.READY, pid=os.getpid())))

    while True:
        try:
            raw = conn.recv_bytes()
        except (EOFError, OSError):
            return  # the parent went away (or closed the pool): nothing left to do
        _truncate(log_fd)
        _truncate(stacks.fileno())
        task = None
        try:
            msg = pickle.loads(raw)
            task = msg["task"]
            answer = rank.run(msg)
        except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt must be reported too
            answer = reply(task, Status.ERROR, error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            payload = pickle.dumps(answer)
        except Exception as exc:  # noqa: BLE001
            payload = pickle.dumps(reply(task, Status.ERROR, error=f"result could not be pickled: {exc}", traceback=""))
        conn.send_bytes(payload)


if __name__ == "__main__":
    main()
