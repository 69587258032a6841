"""Per-test overhead of the test harness vs spawning the ranks afresh for every test.

    python -m scripts.bench.harness                      # 50 trivial world-2 "tests" (5 with mp.spawn)
    python -m scripts.bench.harness --tests 20 --world-size 4 --spawn-tests 0

A trivial test = every rank all-reduces one element and returns it.
"harness": tests/harness pools (started once), the default group kept while tests pass.
"harness, fresh group": the same pools, a new process group for every test (what follows a failure).
"harness, new pool": the pool killed before every test (what follows a hang or a crash): ranks forked from
the zygote on Linux; started fresh on macOS (or CS336_PLATFORM=macos, CS336_ZYGOTE=0), ~2 s of CPU each.
"mp.spawn": what most course harnesses do, new processes importing torch for every test.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from cs336_systems import platform_support
from tests.harness import CONFIG, run_ranks
from tests.harness.pool import get_pool, shutdown_pools
from tests.harness.zygote import enabled as zygote_enabled


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
    parser.add_argument("--new-pool-tests", type=int, default=5, help="tests each on a new pool (default 5)")
    parser.add_argument("--spawn-tests", type=int, default=5, help="tests with mp.spawn, seconds each (default 5)")
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    n, w = args.tests, args.world_size
    from scripts.bench import harness  # the ranks import functions by module name; this file runs as __main__

    trivial = harness.trivial_rank

    def harness_test(fresh_group: bool) -> None:
        get_pool(w, CONFIG.backend).fresh_group |= fresh_group
        assert run_ranks(w, trivial) == [float(w)] * w

    start = time.perf_counter()
    run_ranks(w, trivial)
    startup = time.perf_counter() - start

    def new_pool_test() -> None:
        get_pool(w, CONFIG.backend).close()
        harness_test(False)

    start_way = "zygote forks" if zygote_enabled() else "fresh processes"
    rows = [
        ("harness", _per_test_s(n, lambda: harness_test(False)), n),
        ("harness, fresh group per test", _per_test_s(n, lambda: harness_test(True)), n),
        (f"harness, new pool per test ({start_way})", _per_test_s(args.new_pool_tests, new_pool_test),
         args.new_pool_tests),
    ]  # fmt: skip
    shutdown_pools()
    platform_support.use_gloo_interface()  # mp.spawn's ranks inherit it, as the pool's do

    def spawned_test() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(_spawned, args=(w, f"{tmp}/store"), nprocs=w, join=True)

    if args.spawn_tests:
        rows.append(("mp.spawn per test", _per_test_s(args.spawn_tests, spawned_test), args.spawn_tests))

    print(f"trivial world-{w} tests; the harness's pool start-up ({startup:.1f} s) is paid once per session")
    print("| way | per test ms | tests |\n|---|---|---|")
    for way, seconds, count in rows:
        print(f"| {way} | {1e3 * seconds:.1f} | {count} |")
    if args.spawn_tests:
        print(f"per test, the harness is {rows[-1][1] / rows[0][1]:.0f}x faster than mp.spawn")


if __name__ == "__main__":
    main()
