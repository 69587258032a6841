"""Per-test overhead of the test harness vs spawning the ranks afresh for every test.

    python scripts/bench_harness.py            # 50 trivial world-2 "tests" each way
    python scripts/bench_harness.py --tests 20 --world-size 4

A trivial test = every rank joins a process group, all-reduces one element and returns it.
"harness": tests/harness pools (started once, a fresh process group per test).
"mp.spawn": what most course harnesses do, new processes importing torch for every test.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.harness import run_ranks  # noqa: E402
from tests.harness.pool import shutdown_pools  # noqa: E402


def trivial_rank(ctx):
    x = torch.ones(1)
    dist.all_reduce(x)
    return x.item()


def _spawned(rank: int, world_size: int, store_path: str) -> None:
    dist.init_process_group("gloo", store=dist.FileStore(store_path, world_size), rank=rank, world_size=world_size)
    x = torch.ones(1)
    dist.all_reduce(x)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tests", type=int, default=50)
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    n, w = args.tests, args.world_size
    import bench_harness  # the ranks import functions by module name, and this file runs as __main__

    trivial = bench_harness.trivial_rank

    start = time.perf_counter()
    run_ranks(w, trivial)
    startup = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(n):
        assert run_ranks(w, trivial) == [float(w)] * w
    harness = time.perf_counter() - start
    shutdown_pools()

    start = time.perf_counter()
    for _ in range(n):
        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(_spawned, args=(w, f"{tmp}/store"), nprocs=w, join=True)
    spawned = time.perf_counter() - start

    print(f"{n} trivial world-{w} tests")
    print("| way | total s | per test ms |\n|---|---|---|")
    print(f"| harness (pool start-up {startup:.1f} s, paid once) | {harness + startup:.1f} | {1e3 * harness / n:.0f} |")
    print(f"| mp.spawn per test | {spawned:.1f} | {1e3 * spawned / n:.0f} |")
    print(f"speed-up: {spawned / (harness + startup):.0f}x including start-up, {spawned / harness:.0f}x per test")


if __name__ == "__main__":
    main()
