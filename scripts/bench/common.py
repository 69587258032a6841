"""What every benchmark in scripts/bench/ shares: launching ranks, timing a step, tables, plots, implementations.

A benchmark is a module-level ``fn(rank, world_size, device, **kwargs) -> result`` run on every rank:

    results = launch(world_size, fn, backend="gloo", size=1 << 20)   # list, one result per rank
    seconds = timed(lambda: step(), device)          # inside fn: one step, the slowest rank's time
    seconds = median_time(step, device, iters=5, warmup=1)
    low, high = ratio_interval(theirs, ours)        # 90% bootstrap interval of median(theirs) / median(ours)

``launch`` works two ways: under ``torchrun`` (one call per process, the process group already
set up from the environment; returns ``[this rank's result]`` on every rank and ``main_rank()``
says who prints) or standalone (it spawns ``world_size`` processes itself, rendezvous through a
temporary file, and returns every rank's result in the parent; gloo talks over the interface
``cs336_systems/platform_support.py`` picks: the loopback, or your ``GLOO_SOCKET_IFNAME``).

Every step time is taken by ``timed``, one rule for the whole kit: the ranks start together (a
barrier), run the step, wait for the device (``torch.cuda.synchronize`` when the work is on CUDA:
kernels are asynchronous), and the step's time is the slowest rank's (a MAX all-reduce, so every
rank agrees on it). A step ends when its slowest rank does.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import queue as queue_module
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from cs336_systems import platform_support
from tests.harness.defaults import (  # one table of implementation names and defaults for the kit
    DEFAULT_BACKEND,
    resolve_impl,
)

ROOT = Path(__file__).resolve().parents[2]
OUT_DIR = ROOT / "out"


def default_impl() -> str:
    """The staff checkout runs the reference by default; a student release has only the student package."""
    return "reference" if importlib.util.find_spec(resolve_impl("reference")) else "student"


def add_common_args(parser) -> None:
    """--impl, --backend and --out, with the same meaning in every benchmark."""
    default = default_impl()
    shipped = "student, reference" if default == "reference" else "student"  # the student release has no reference
    parser.add_argument("--impl", default=default, help=f"{shipped}, or a package name (default {default})")
    parser.add_argument(
        "--backend",
        default=DEFAULT_BACKEND,
        choices=["gloo", "nccl"],
        help=f"gloo (CPU) or nccl (GPU), default {DEFAULT_BACKEND}",
    )
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="folder for the PNG and CSV (default out/)")


def load_impl(impl: str, module: str):
    """``load_impl("student", "collectives")`` -> ``cs336_systems.collectives``."""
    return importlib.import_module(f"{resolve_impl(impl)}.{module}")


def under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or ("RANK" in os.environ and "WORLD_SIZE" in os.environ)


def main_rank() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device, group=None, *, together: bool = True) -> float:
    """Seconds for one ``fn()``: barrier, run, synchronise the device, then the slowest rank's time.

    Every rank of ``group`` (default: all) must call it together; every rank gets the same number.
    Outside a process group, or with ``together=False`` (work this process does alone, e.g. a
    one-device baseline run on the main rank only), it is this process's own time."""
    distributed = together and dist.is_initialized()
    _synchronize(device)  # work queued before the step is not the step's
    if distributed:
        dist.barrier(group=group)  # start together: a late starter's wait is not the step's time
    start = time.perf_counter()
    fn()
    _synchronize(device)
    elapsed = time.perf_counter() - start
    if not distributed:
        return elapsed
    slowest = torch.tensor([elapsed], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)  # a step ends when its slowest rank does
    return slowest.item()


def median_time(fn: Callable[[], object], device, iters: int, warmup: int = 0, group=None, *, together=True) -> float:
    """The median of ``iters`` ``timed(fn)`` after ``warmup`` untimed (but identically run) calls."""
    times = [timed(fn, device, group, together=together) for _ in range(warmup + iters)]
    return statistics.median(times[warmup:])


def ratio_interval(top: Sequence[float], bottom: Sequence[float], level: float = 0.9,
                   resamples: int = 2000) -> tuple[float, float]:  # fmt: skip
    """Bootstrap interval of median(top) / median(bottom) over paired rounds: ``top[i]`` and
    ``bottom[i]`` were timed in the same round (interleaved, so they met the same spell of the
    machine), and resampling keeps each round's pair together. The central ``level`` of the resampled
    ratios: how far this run's ratio can be trusted. Another run, in another spell, can land outside."""
    import numpy as np

    pairs = np.array([top, bottom], dtype=float)  # (2, rounds)
    picks = np.random.default_rng(0).integers(0, pairs.shape[1], size=(resamples, pairs.shape[1]))
    medians = np.median(pairs[:, picks], axis=2)  # (2, resamples)
    ratios = medians[0] / medians[1]
    tail = (1 - level) / 2
    return float(np.quantile(ratios, tail)), float(np.quantile(ratios, 1 - tail))


def _device(backend: str, rank: int) -> torch.device:
    if backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        return torch.device(f"cuda:{local}")
    return torch.device("cpu")


def _worker(rank: int, world_size: int, backend: str, store_path: str, fn, kwargs, queue) -> None:
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    store = dist.FileStore(store_path, world_size)
    try:
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size)
    except RuntimeError as exc:  # gloo's C++ enforce message on its interface becomes one line with the fix
        problem = platform_support.gloo_failure(str(exc))
        if problem:
            raise SystemExit(f"rank {rank}: {problem}") from None
        raise
    try:
        result = fn(rank, world_size, _device(backend, rank), **kwargs)
        queue.put((rank, result))
    finally:
        dist.destroy_process_group()


def launch(world_size: int, fn: Callable, *, backend: str = "gloo", **kwargs) -> list:
    """Run ``fn(rank, world_size, device, **kwargs)`` on every rank (see the module docstring)."""
    if under_torchrun():
        if not dist.is_initialized():
            dist.init_process_group(backend)
        rank = dist.get_rank()
        return [fn(rank, dist.get_world_size(), _device(backend, rank), **kwargs)]
    platform_support.use_gloo_interface()  # the loopback (or yours): the spawned ranks inherit the environment
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [
            ctx.Process(target=_worker, args=(r, world_size, backend, f"{tmp}/store", fn, kwargs, queue))
            for r in range(world_size)
        ]
        for p in procs:
            p.start()
        results = {}
        try:
            while len(results) < world_size:
                try:
                    rank, result = queue.get(timeout=1.0)
                    results[rank] = result
                except queue_module.Empty:
                    dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                    if dead:  # a crashed rank would leave the others (and us) waiting forever
                        raise RuntimeError(f"a benchmark rank failed (exit codes {dead}); see its traceback") from None
        finally:
            for p in procs:
                if p.is_alive() and len(results) < world_size:
                    p.kill()
                p.join()
    return [results[r] for r in range(world_size)]


def format_table(headers: Sequence[str], rows: Sequence[Sequence], floatfmt: str = ".3g") -> str:
    """A Markdown table (pastes into notes and handouts as is)."""

    def cell(v) -> str:
        return format(v, floatfmt) if isinstance(v, float) else str(v)

    cells = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = lambda vals: "| " + " | ".join(v.rjust(w) for v, w in zip(vals, widths)) + " |"
    return "\n".join([line(list(headers)), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, cells)])


def write_csv(path: Path, headers: Sequence[str], rows: Sequence[Sequence]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [",".join(headers)] + [",".join(str(v) for v in row) for row in rows]
    path.write_text("\n".join(lines) + "\n")


def save_plot(path: Path, draw: Callable) -> Path:
    """``draw(ax)`` on a fresh figure, saved as PNG without needing a display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    draw(ax)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
