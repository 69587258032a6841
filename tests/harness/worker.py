"""One rank of a reusable worker pool (the child side of ``tests/harness/pool.py``).

Started by the parent as ``python -m tests.harness.worker`` with its rank, the world size, the
rendezvous file and an inherited socket (``--fd``) that carries length-prefixed pickles:

    parent -> worker   {"task": n, "fn": <module-level function>, "args": ..., "kwargs": ...,
                        "impl": "reference_solutions", "backend": "gloo", "seed": 0}
    worker -> parent   {"task": n, "status": "ok", "value": <tensors moved to CPU>}
                    or {"task": n, "status": "error", "error": "ValueError: ...", "traceback": "..."}

Each task gets a fresh default process group (a ``PrefixStore`` per task on one ``FileStore``),
so messages left in flight by a failed test can never reach the next one; gloo does this in
~30 ms. The rank's stdout/stderr go to a log file and its Python stacks (on SIGUSR1, or on a
crash) to a stack file, both truncated at every task so the parent can show what this test did.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import pickle
import resource
import signal
import sys
import traceback
from multiprocessing.connection import Connection

from tests.harness.context import RankContext


def _limit_resources() -> None:
    """Caps requested by the grader through the environment (0 or unset = no cap)."""
    log_mb = int(os.environ.get("CS336_WORKER_LOG_LIMIT_MB", "0"))
    if log_mb:
        # A write past the cap fails with EFBIG instead of killing the rank with SIGXFSZ.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (log_mb << 20, log_mb << 20))
    mem_mb = int(os.environ.get("CS336_WORKER_MEMORY_LIMIT_MB", "0"))
    if mem_mb:
        resource.setrlimit(resource.RLIMIT_AS, (mem_mb << 20, mem_mb << 20))


def _die_with_parent() -> None:
    """Linux: get SIGKILL when the parent dies, so no rank outlives a killed pytest."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


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


def _truncate(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)


def _run_task(msg: dict, args: argparse.Namespace, store) -> dict:
    import torch
    import torch.distributed as dist

    # The previous task's group is destroyed only now, when the parent has heard from every rank:
    # destroying it at the end of a task would turn a peer's hang into a confusing "connection
    # closed" error instead of a stack showing where it waits.
    if dist.is_initialized():
        dist.destroy_process_group()
    backend = msg["backend"]
    device = torch.device(f"cuda:{args.rank}") if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.manual_seed(msg.get("seed", 0) + args.rank)
    task_store = dist.PrefixStore(f"task{msg['task']}/", store)
    init_kwargs = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(backend, store=task_store, rank=args.rank, world_size=args.world_size, **init_kwargs)
    ctx = RankContext(rank=args.rank, world_size=args.world_size, backend=backend, device=device, impl=msg["impl"])
    value = msg["fn"](ctx, *msg["args"], **msg["kwargs"])
    if device.type == "cuda":
        torch.cuda.synchronize()
    return {"task": msg["task"], "status": "ok", "value": _to_cpu(value)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--stacks", required=True)
    args = parser.parse_args()

    _die_with_parent()
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
    store = dist.FileStore(args.store, args.world_size)
    conn.send_bytes(pickle.dumps({"status": "ready", "pid": os.getpid()}))

    while True:
        try:
            raw = conn.recv_bytes()
        except (EOFError, OSError):
            return  # the parent went away: nothing left to do
        _truncate(log_fd)
        _truncate(stacks.fileno())
        task = None
        try:
            msg = pickle.loads(raw)
            task = msg.get("task")
            if msg.get("stop"):
                return
            reply = _run_task(msg, args, store)
        except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt must be reported too
            reply = {
                "task": task,
                "status": "error",
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(),
            }
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            payload = pickle.dumps(reply)
        except Exception as exc:  # noqa: BLE001
            payload = pickle.dumps(
                {"task": task, "status": "error", "error": f"result could not be pickled: {exc}", "traceback": ""}
            )
        conn.send_bytes(payload)


if __name__ == "__main__":
    main()
