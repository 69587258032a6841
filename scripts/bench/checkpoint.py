"""Checkpoint throughput: the implementation's sharded save/load and async save next to torch.distributed.checkpoint.

    python -m scripts.bench.checkpoint                                     # gloo, N = 1, 2, 4; 16-256 MiB (~2.5 min)
    python -m scripts.bench.checkpoint --impl student --world-sizes 2      # your implementation
    python -m scripts.bench.checkpoint --sizes-mb 1024 --rounds 3          # a bigger state
    torchrun --standalone --nproc_per_node=8 -m scripts.bench.checkpoint --backend nccl --world-sizes 8

For every world size N and global state size S, each rank holds FSDP-style flat shards (1/N of each of
eight float32 tensors) on its device. Every round, in this order (the same spell of the machine for
all): the implementation's ``save_checkpoint`` and ``load_checkpoint``, DCP's ``save`` and ``load`` of
the same shards as DTensors, the implementation's ``AsyncCheckpointer.save`` (the time until it
returns: staging; and until ``wait()``: the whole save) and DCP's ``async_save`` (until its future is
returned, and until it is done). Times are the slowest rank's (scripts/bench/common.timed); the table
shows medians over rounds as GB/s of the global state, and DCP's time over yours with a 90% bootstrap
interval over rounds (> 1: yours is faster). The bare lines are what the disk allows: every rank writes its
shards' bytes into one file with an fsync, then reads them back, plain Python, no checksums (save/bare and
load/bare: the share of it yours reaches). The async lines are the blocking time over a
synchronous save: the share of a save the training step still waits for. On GPUs (NCCL), three more columns
give the bounds of the copies over the host link, timed in the same rounds: each rank's shards copied into
pinned host memory (``pinned d2h ms``: the least an async save can block), the blocking time over it
(``block/d2h``, a 90% interval: 1 is the bound), and copied back to the device (``pinned h2d GB/s``: the last leg
of a load). Files go to a temporary
folder (``--dir`` to choose one: a local disk and a parallel filesystem give different numbers).
Writes out/bench_checkpoint.{csv,png}. Measured on a 2-core machine, nothing else running (2026-11-27): the
default (16, 64 and 256 MiB at N = 1, 2, 4; 18, 12 and 6 rounds) in 2 min 35 s (``--rounds 5``: about 2 min);
under a load average of 12, about 2.5 times that. The pairs (yours, DCP's, bare) take turns at going first,
round by round. Rank 0 prints each configuration's rounds as they finish.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from scripts.bench.common import (
    OUT_DIR,
    add_common_args,
    format_table,
    launch,
    load_impl,
    main_rank,
    ratio_interval,
    save_plot,
    timed,
    under_torchrun,
    write_csv,
)

TENSORS = 8
METHODS = ["save", "dcp save", "load", "dcp load", "async block", "async total", "dcp async block", "dcp async total",
           "bare write", "bare read"]  # fmt: skip
# Whole megabytes per write() reach the page cache several times more slowly on some Linux kernels (this
# machine's among them), so the bare line writes in calls of this size.
BARE_WRITE_BYTES = 512 << 10


def _shards(C, rank: int, world: int, size_bytes: int, device, fill: float | None):
    """(our state, DCP's state): TENSORS flat float32 tensors of size_bytes / TENSORS, this rank's chunk."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor, Shard

    mesh = DeviceMesh.from_group(dist.group.WORLD, device.type)
    numel = max(size_bytes // (4 * TENSORS), 1)
    chunk = -(-numel // world)
    start, stop = min(rank * chunk, numel), min((rank + 1) * chunk, numel)
    ours, theirs = {}, {}
    for i in range(TENSORS):
        gen = torch.Generator().manual_seed(i)
        local = (torch.randn(stop - start, generator=gen) if fill is None else torch.full((stop - start,), fill)).to(
            device
        )
        ours[f"w{i}"] = C.Shard(local, (numel,), (start,))
        theirs[f"w{i}"] = DTensor.from_local(local.clone(), mesh, [Shard(0)], run_check=False,
                                             shape=torch.Size((numel,)), stride=(1,))  # fmt: skip
    return ours, theirs


def _copy_bounds(ours: dict) -> dict:
    """On a GPU, the bounds of staging and of a load's last leg: this rank's shards copied into pinned host memory
    (what an async save must wait for at least) and from there back to the device, into buffers allocated once,
    every copy queued (``non_blocking``) and one wait at the end (``timed`` synchronises the device)."""
    shards = [s.local for s in ours.values()]
    host = [torch.empty_like(t, device="cpu", pin_memory=True) for t in shards]
    back = [torch.empty_like(t) for t in shards]

    def d2h() -> None:
        for h, t in zip(host, shards):
            h.copy_(t, non_blocking=True)

    def h2d() -> None:
        for b, h in zip(back, host):
            b.copy_(h, non_blocking=True)

    return {"bare d2h": d2h, "bare h2d": h2d}


def _round(C, dcp, ckpt, ours, theirs, into, into_theirs, folder: Path, step: int, device, dcp_group,
           bounds: dict) -> dict:  # fmt: skip
    """One round: every method once, on the same state. The synchronous pairs (yours, DCP's, the bare
    lines, and on a GPU the bare copies of ``bounds``) take turns at going first, round by round, so that none
    always meets the disk right after another's writes; the async saves come last."""
    bare = folder / f"bare_{dist.get_rank()}_{step}"
    data = [memoryview(t.local.detach().cpu().contiguous().view(torch.uint8).numpy()) for t in ours.values()]
    landing = bytearray(sum(len(d) for d in data))  # the bare read's destination exists, as a load's does
    got = {}
    pairs = [
        {"save": lambda: C.save_checkpoint(ours, folder / "ours", step),
         "load": lambda: C.load_checkpoint(into, folder / "ours", step)},
        {"dcp save": lambda: dcp.save(theirs, checkpoint_id=folder / f"dcp{step}"),
         "dcp load": lambda: dcp.load(into_theirs, checkpoint_id=folder / f"dcp{step}")},
        # What the disk allows: each rank writes (and fsyncs) its shards' bytes into one file, reads them back.
        {"bare write": lambda: _bare_write(bare, data), "bare read": lambda: _bare_read(bare, landing)},
    ] + ([bounds] if bounds else [])  # fmt: skip
    turn = step % len(pairs)
    for pair in pairs[turn:] + pairs[:turn]:
        for method, fn in pair.items():
            got[method] = timed(fn, device)
    bare.unlink()
    got["async block"] = timed(lambda: ckpt.save(ours, step), device)
    got["async total"] = got["async block"] + timed(ckpt.wait, device)
    future = []  # DCP's background write gets a group of its own, as ours does: never the timer's

    def start():
        future.append(dcp.async_save(theirs, checkpoint_id=folder / f"dcpa{step}", process_group=dcp_group))

    got["dcp async block"] = timed(start, device)
    got["dcp async total"] = got["dcp async block"] + timed(lambda: future[0].result(), device)
    return got


def _bare_write(path: Path, data: list) -> None:
    """Plain writes of ``BARE_WRITE_BYTES``, then fsync."""
    with open(path, "wb") as f:
        for chunk in data:
            for at in range(0, len(chunk), BARE_WRITE_BYTES):
                f.write(chunk[at : at + BARE_WRITE_BYTES])
        f.flush()
        os.fsync(f.fileno())


def _bare_read(path: Path, into: bytearray) -> None:
    with open(path, "rb") as f:
        f.readinto(into)


def _rounds_for(size: int, rounds: int) -> int:
    """More rounds for smaller states, whose rounds are short and whose times are noisier: ``rounds`` at
    256 MiB and above, twice as many at 64 MiB, three times at 16 MiB and below."""
    return rounds * max(1, min(3, round(math.sqrt((256 << 20) / size))))


def bench_rank(rank, world_size, device, *, impl, sizes, rounds, root):
    import torch.distributed.checkpoint as dcp

    C = load_impl(impl, "checkpoint")
    dcp_group = dist.new_group(backend="gloo")
    rows = []
    for size in sizes:
        folder = Path(root) / f"n{world_size}_s{size}"
        ours, theirs = _shards(C, rank, world_size, size, device, None)
        into, into_theirs = _shards(C, rank, world_size, size, device, 0.0)
        ckpt = C.AsyncCheckpointer(folder / "async")
        bounds = _copy_bounds(ours) if device.type == "cuda" else {}
        times = {m: [] for m in METHODS + list(bounds)}
        began = time.perf_counter()
        many = _rounds_for(size, rounds)
        for r in range(many + 1):  # round 0 warms up (page cache, thread pools, DCP's planner)
            got = _round(C, dcp, ckpt, ours, theirs, into, into_theirs, folder, r + 1, device, dcp_group, bounds)
            for m, t in got.items():
                times[m] += [t] if r else []
            if rank == 0:  # progress per configuration, on one line
                print(f"\rN={world_size} {size / (1 << 20):g} MiB: round {r}/{many} "
                      f"({time.perf_counter() - began:.1f} s)", end="", flush=True)  # fmt: skip
        if rank == 0:
            save, load = (size / statistics.median(times[m]) / 1e9 for m in ("save", "load"))
            print(f"\rN={world_size} {size / (1 << 20):g} MiB: {many} rounds in {time.perf_counter() - began:.1f} s, "
                  f"save {save:.2f} GB/s, load {load:.2f} GB/s", flush=True)  # fmt: skip
        ckpt.close()
        dist.barrier()
        if rank == 0:
            shutil.rmtree(folder, ignore_errors=True)
        rows.append((size, times))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    parser.add_argument("--world-sizes", default="1,2,4")
    parser.add_argument("--sizes-mb", default="16,64,256", help="global state sizes in MiB")
    parser.add_argument("--rounds", type=int, default=6, help="rounds at 256 MiB (more for smaller states)")
    parser.add_argument("--dir", default=None, help="where checkpoints are written (default: a temporary folder)")
    args = parser.parse_args()
    sizes = [int(float(s) * (1 << 20)) for s in args.sizes_mb.split(",")]
    worlds = [int(w) for w in args.world_sizes.split(",")]
    if under_torchrun():
        worlds = [dist.get_world_size()] if dist.is_initialized() else worlds[:1]
    root = Path(args.dir or tempfile.mkdtemp(prefix="bench_ckpt_"))
    rows, plot, on_gpu = [], {}, False
    for world in worlds:
        results = launch(world, bench_rank, backend=args.backend, impl=args.impl, sizes=sizes,
                         rounds=args.rounds, root=str(root))  # fmt: skip
        if not main_rank():
            continue
        for size, times in results[0]:
            med = {m: statistics.median(t) for m, t in times.items()}
            gbs = {m: size / med[m] / 1e9 for m in METHODS}
            save_lo, save_hi = ratio_interval(times["dcp save"], times["save"])
            load_lo, load_hi = ratio_interval(times["dcp load"], times["load"])
            block_lo, block_hi = ratio_interval(times["async block"], times["save"])
            dcp_block = med["dcp async block"] / med["dcp save"]
            rows.append([world, size / (1 << 20), gbs["save"], gbs["dcp save"], f"{save_lo:.2f}-{save_hi:.2f}",
                         gbs["load"], gbs["dcp load"], f"{load_lo:.2f}-{load_hi:.2f}", med["async block"] * 1e3,
                         f"{block_lo:.2f}-{block_hi:.2f}", med["dcp async block"] * 1e3, dcp_block,
                         gbs["bare write"], gbs["bare read"], gbs["save"] / gbs["bare write"],
                         gbs["load"] / gbs["bare read"]])  # fmt: skip
            if "bare d2h" in times:  # a GPU: the bounds, and async blocking against the copy it must wait for
                on_gpu = True
                d2h_lo, d2h_hi = ratio_interval(times["async block"], times["bare d2h"])
                rows[-1] += [med["bare d2h"] * 1e3, f"{d2h_lo:.2f}-{d2h_hi:.2f}", size / med["bare h2d"] / 1e9]
            plot[(world, size)] = gbs
    if not main_rank():
        return
    if args.dir is None:
        shutil.rmtree(root, ignore_errors=True)
    headers = ["N", "MiB", "save GB/s", "dcp save GB/s", "dcp/yours save", "load GB/s", "dcp load GB/s",
               "dcp/yours load", "async block ms", "block/sync save", "dcp async block ms",
               "dcp block/save", "bare write GB/s", "bare read GB/s", "save/bare", "load/bare"]  # fmt: skip
    if on_gpu:
        headers += ["pinned d2h ms", "block/d2h", "pinned h2d GB/s"]
    print(format_table(headers, rows))
    out = Path(args.out) if getattr(args, "out", None) else OUT_DIR
    write_csv(out / "bench_checkpoint.csv", headers, rows)

    def draw(ax):
        labels = [f"N={w}\n{s / (1 << 20):.0f} MiB" for w, s in plot]
        width = 0.8 / 4
        for i, m in enumerate(["save", "dcp save", "load", "dcp load"]):
            ax.bar([x + i * width for x in range(len(plot))], [g[m] for g in plot.values()], width, label=m)
        ax.set_xticks([x + 1.5 * width for x in range(len(plot))], labels)
        ax.set_ylabel("GB/s of the global state (median)")
        ax.set_title("Sharded checkpoint save/load: yours vs torch.distributed.checkpoint")
        ax.legend()

    print(f"wrote {out / 'bench_checkpoint.csv'} and {save_plot(out / 'bench_checkpoint.png', draw)}")


if __name__ == "__main__":
    main()
