"""Shared plumbing for the benchmarks in scripts/: launching ranks, tables, plots, implementations.

A benchmark is a module-level ``fn(rank, world_size, device, **kwargs) -> result`` run on every rank:

    results = launch(world_size, fn, backend="gloo", size=1 << 20)   # list, one result per rank

``launch`` works two ways: under ``torchrun`` (one call per process, the process group already
set up from the environment; returns ``[this rank's result]`` on every rank and ``main_rank()``
says who prints) or standalone (it spawns ``world_size`` processes itself, rendezvous through a
temporary file, and returns every rank's result in the parent).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import queue as queue_module
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.harness.defaults import (  # one table of implementation names and defaults for the kit
    DEFAULT_BACKEND,
    resolve_impl,
)

ROOT = Path(__file__).resolve().parents[2]
OUT_DIR = ROOT / "out"


def add_common_args(parser) -> None:
    """--impl, --backend and --out, with the same meaning in every benchmark."""
    # The staff checkout benchmarks the reference by default; a student release has only the student package.
    default = "reference" if importlib.util.find_spec(resolve_impl("reference")) else "student"
    parser.add_argument("--impl", default=default, help=f"student, reference, or a package name (default {default})")
    parser.add_argument(
        "--backend",
        default=DEFAULT_BACKEND,
        choices=["gloo", "nccl"],
        help=f"gloo (CPU) or nccl (GPU), default {DEFAULT_BACKEND}",
    )
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="folder for the PNG and CSV (default out/)")


def load_impl(impl: str, module: str):
    """``load_impl("reference", "collectives")`` -> ``reference_solutions.collectives``."""
    return importlib.import_module(f"{resolve_impl(impl)}.{module}")


def under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or ("RANK" in os.environ and "WORLD_SIZE" in os.environ)


def main_rank() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def _device(backend: str, rank: int) -> torch.device:
    if backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        return torch.device(f"cuda:{local}")
    return torch.device("cpu")


def _worker(rank: int, world_size: int, backend: str, store_path: str, fn, kwargs, queue) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    store = dist.FileStore(store_path, world_size)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size)
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
