"""Our ring all-reduce vs torch's ``dist.all_reduce``, in the same run: bandwidth table and plot.

    python scripts/bench_collectives.py                         # gloo on CPU, world 2 and 4
    python scripts/bench_collectives.py --impl student          # your implementation
    torchrun --standalone --nproc_per_node=8 scripts/bench_collectives.py --backend nccl

For each message size M (float32) it times both all-reduces (median over iterations, each
iteration ended by a barrier-free wait so the time is the slowest rank's) and reports
    algorithm bandwidth  algbw = M / t
    bus bandwidth        busbw = algbw * 2(N-1)/N   (what each link carries in a ring; comparable
                                                    across N, as in nccl-tests)
and the ratio ours / built-in. Writes out/bench_collectives.{csv,png}.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist
from benchlib import add_common_args, format_table, launch, load_impl, main_rank, save_plot, under_torchrun, write_csv
from tqdm import tqdm

DEFAULT_SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def _time(op, x: torch.Tensor, iters: int, device: torch.device) -> float:
    """Median seconds per call; every rank agrees on the slowest rank's time (a max all-reduce)."""
    times = []
    for _ in range(iters):
        dist.barrier()
        start = time.perf_counter()
        op(x)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=device)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the collective ends when its slowest rank does
        times.append(elapsed.item())
    return statistics.median(times)


def bench_rank(rank: int, world_size: int, device: torch.device, impl: str, sizes: list[int], iters: int):
    ours = load_impl(impl, "collectives").all_reduce
    builtin = dist.all_reduce
    rows = []
    for size in tqdm(sizes, disable=rank != 0, desc=f"world {world_size}", leave=False):
        x = torch.ones(size // 4, dtype=torch.float32, device=device)
        n_iters = max(iters, min(50, (64 << 20) // size))  # more repeats where a call is cheap
        for op in (ours, builtin):  # warm up both (connections, allocator)
            op(x)
        # Interleave the two so that machine noise hits both alike.
        t_builtin, t_ours = [], []
        for _ in range(3):
            t_builtin.append(_time(builtin, x, max(1, n_iters // 3), device))
            t_ours.append(_time(ours, x, max(1, n_iters // 3), device))
        rows.append((size, statistics.median(t_ours), statistics.median(t_builtin)))
    return rows


def _fmt_size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    parser.add_argument("--world-sizes", default="2,4", help="standalone runs (ignored under torchrun)")
    parser.add_argument("--max-size", type=int, default=64 << 20, help="largest message in bytes (default 64 MiB)")
    parser.add_argument("--iters", type=int, default=3, help="minimum timed iterations per size")
    args = parser.parse_args()
    sizes = [s for s in DEFAULT_SIZES if s <= args.max_size]
    worlds = [None] if under_torchrun() else [int(w) for w in args.world_sizes.split(",")]

    table, csv_rows = [], []
    for world in worlds:
        kwargs = dict(backend=args.backend, impl=args.impl, sizes=sizes, iters=args.iters)
        rows = launch(world or 0, bench_rank, **kwargs)[0]
        world = world or dist.get_world_size()
        for size, t_ours, t_builtin in rows:
            factor = 2 * (world - 1) / world
            bus_ours, bus_builtin = factor * size / t_ours / 1e9, factor * size / t_builtin / 1e9
            table.append([world, _fmt_size(size), t_ours * 1e3, t_builtin * 1e3, size / t_ours / 1e9, bus_ours,
                          bus_builtin, bus_ours / bus_builtin])  # fmt: skip
            csv_rows.append([world, size, t_ours, t_builtin, bus_ours, bus_builtin])
    if not main_rank():
        return
    headers = ["world", "size", "ours ms", "torch ms", "ours algbw GB/s", "ours busbw GB/s", "torch busbw GB/s",
               "ratio (ours/torch)"]  # fmt: skip
    print(f"\nring all_reduce ({args.impl}) vs dist.all_reduce, backend {args.backend}, float32\n")
    print(format_table(headers, table))
    write_csv(args.out / "bench_collectives.csv", ["world", "bytes", "ours_s", "torch_s", "ours_busbw_GBps",
                                                    "torch_busbw_GBps"], csv_rows)  # fmt: skip

    def draw(ax):
        for world in sorted({r[0] for r in csv_rows}):
            rows = [r for r in csv_rows if r[0] == world]
            xs = [r[1] for r in rows]
            ax.plot(xs, [r[4] for r in rows], "o-", label=f"ours, world {world}")
            ax.plot(xs, [r[5] for r in rows], "s--", label=f"dist.all_reduce, world {world}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.set_title(f"ring all-reduce vs built-in ({args.backend})")
        ax.legend()
        ax.grid(True, alpha=0.3)

    print(f"\nplot: {save_plot(args.out / 'bench_collectives.png', draw)}")


if __name__ == "__main__":
    main()
