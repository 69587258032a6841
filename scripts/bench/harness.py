"""Per-test overhead of the test harness vs spawning the ranks afresh for every test.

    python -m scripts.bench.harness                      # 50 trivial world-2 "tests" (5 with mp.spawn)
    python -m scripts.bench.harness --tests 20 --world-size 4 --spawn-tests 0

A trivial test = every rank all-reduces one element and returns it.
"harness": tests/harness pools (started once), the default group kept while tests pass.
"harness, fresh group": the same pools, a new process group for every test (what follows a failure).
"mp.spawn": what most course harnesses do, new processes importing torch for every test.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.harness import CONFIG, run_ranks
from tests.harness.pool import get_pool, shutdown_pools


def trivial_rank(ctx):
    x = torch.ones(1)
    dist.all_reduce(x)
    return x.item()


def _spawned(rank: int, world_size: int, store_path: str) -> None:
    dist.init_process_group("gloo", store=dist.FileStore(store_path, world_size), rank=rank, world_size=world_size)
    x = torch.ones(1)
    dist.all_reduce(x)
    dist.destroy_process_group()


def _per_test_s(n: int, run_one) -> float:
    start = time.perf_counter()
    for _ in range(n):
        run_one()
    return (time.perf_counter() - start) / max(n, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tests", type=int, default=50, help="trivial tests per harness way (default 50)")
    parser.add_argument("--spawn-tests", type=int, default=5, help="tests with mp.spawn, seconds each (default 5)")
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    n, w = args.tests, args.world_size
    import bench_harness  # the ranks import functions by module name, and this file runs as __main__

    trivial = bench_harness.trivial_rank

    def harness_test(fresh_group: bool) -> None:
        get_pool(w, CONFIG.backend).fresh_group |= fresh_group
        assert run_ranks(w, trivial) == [float(w)] * w

    start = time.perf_counter()
    run_ranks(w, trivial)
    startup = time.perf_counter() - start
    rows = [
        ("harness", _per_test_s(n, lambda: harness_test(False))),
        ("harness, fresh group per test", _per_test_s(n, lambda: harness_test(True))),
    ]
    shutdown_pools()

    def spawned_test() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(_spawned, args=(w, f"{tmp}/store"), nprocs=w, join=True)

    if args.spawn_tests:
        rows.append(("mp.spawn per test", _per_test_s(args.spawn_tests, spawned_test)))

    print(f"trivial world-{w} tests; the harness's pool start-up ({startup:.1f} s) is paid once per session")
    print("| way | per test ms | tests |\n|---|---|---|")
    for (way, seconds), count in zip(rows, [n, n, args.spawn_tests]):
        print(f"| {way} | {1e3 * seconds:.1f} | {count} |")
    if args.spawn_tests:
        print(f"per test, the harness is {rows[2][1] / rows[0][1]:.0f}x faster than mp.spawn")


if __name__ == "__main__":
    main()
