"""Ring attention (context parallelism) vs one process running SDPA on the whole sequence, in the same run.

    python -m scripts.bench.context_parallel                                  # gloo on CPU, N = 1, 2, 4 (~1-2 min)
    python -m scripts.bench.context_parallel --impl student --world-sizes 2   # your implementation
    python -m scripts.bench.context_parallel --seqs 1024,2048,4096 --heads 8  # longer sequences
    torchrun --standalone --nproc_per_node=8 -m scripts.bench.context_parallel --backend nccl --world-sizes 8

For every world size N, sequence length s and mask (full; causal with the contiguous and the zigzag
layout) each rank shards the same q, k, v (batch, heads, s, d) with ``shard_sequence`` and times one
training step of ``ring_attention`` (forward + backward; median over iterations; the slowest rank).
One more step runs under the test suite's CommRecorder and MatmulLog and gives the bytes each rank
sent, next to the formula (N-1)(K+V) forward + (2N-1)(K+V) backward with K = V = b·h·(s/N)·d·4 bytes,
and each rank's forward attention FLOPs: "imbalance" is the busiest rank's over the average (1 =
balanced; the contiguous causal layout makes the last rank do about 2N/(N+1) times the average).
The baseline is ``scaled_dot_product_attention`` forward + backward on the whole sequence in this
process (all its threads). Writes out/bench_context_parallel.{csv,png}.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tqdm import tqdm

from scripts.bench.common import (
    add_common_args,
    format_table,
    launch,
    load_impl,
    main_rank,
    median_time,
    save_plot,
    under_torchrun,
    write_csv,
)
from tests.harness.recorder import CommRecorder, bytes_sent
from tests.oracles.matmul_log import MatmulLog

MIB = float(1 << 20)
VARIANTS = [("full", False), ("causal contiguous", False), ("causal zigzag", True)]


def ring_bytes_formula(world_size: int, block_bytes: int) -> tuple[int, int]:
    """(forward, backward) bytes one rank sends: N-1 key/value hops, then N-1 again plus N gradient hops."""
    kv = 2 * block_bytes
    return (world_size - 1) * kv, (2 * world_size - 1) * kv if world_size > 1 else 0


def _inputs(batch: int, heads: int, seq: int, head_dim: int, device) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)  # the same whole sequence on every rank
    return [torch.randn(batch, heads, seq, head_dim, generator=gen).to(device) for _ in range(4)]


def ring_rank(rank, world_size, device, *, impl, configs, batch, heads, head_dim, iters, warmup):
    """Every (seq, causal, zigzag) of ``configs`` in one process group (spawning costs seconds)."""
    return [_one_config(world_size, device, impl, batch, heads, head_dim, iters, warmup, *c) for c in configs]


def _one_config(world_size, device, impl, batch, heads, head_dim, iters, warmup, seq, causal, zigzag):
    cp = load_impl(impl, "context_parallel")
    q, k, v, dout = (cp.shard_sequence(t, zigzag=zigzag) for t in _inputs(batch, heads, seq, head_dim, device))
    q, k, v = (t.requires_grad_() for t in (q, k, v))

    def step():
        out = cp.ring_attention(q, k, v, causal=causal, zigzag=zigzag)
        out.backward(dout)
        q.grad = k.grad = v.grad = None

    seconds = median_time(step, device, iters, warmup)  # the slowest rank's: a ring is as fast as its slowest
    with CommRecorder() as rec, MatmulLog() as log:
        step()
    fwd = [e for e in rec.events if not e.in_backward]
    mine = {
        "seconds": seconds,
        "sent_fwd": bytes_sent(fwd),
        "sent_bwd": bytes_sent(rec.events) - bytes_sent(fwd),
        "flops_fwd": sum(f for _, f, backward in log.events if not backward),
    }
    every = [mine] * world_size
    if world_size > 1:  # every rank's numbers on every rank (under torchrun only this process reports)
        dist.all_gather_object(every, mine)
    return every


def sdpa_seconds(batch, heads, seq, head_dim, causal, iters, warmup, device) -> float:
    q, k, v, dout = _inputs(batch, heads, seq, head_dim, device)
    q, k, v = (t.requires_grad_() for t in (q, k, v))

    def step():
        F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(dout)
        q.grad = k.grad = v.grad = None

    return median_time(step, device, iters, warmup, together=False)  # the main rank alone (under torchrun too)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    parser.add_argument("--world-sizes", default="1,2,4", help="ring sizes N (default 1,2,4; ignored under torchrun)")
    parser.add_argument("--seqs", default="512,1024,2048", help="whole-sequence lengths (divisible by 2N)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--iters", type=int, default=5, help="timed steps per configuration (median reported)")
    parser.add_argument("--warmup", type=int, default=1)
    args = parser.parse_args()
    sizes = [int(w) for w in args.world_sizes.split(",")]
    if under_torchrun():
        if not dist.is_initialized():
            dist.init_process_group(args.backend)
        sizes = [dist.get_world_size()]
    seqs = [int(s) for s in args.seqs.split(",")]
    device = torch.device("cuda" if args.backend == "nccl" else "cpu")
    shape = {"batch": args.batch, "heads": args.heads, "head_dim": args.head_dim}
    headers = ["N", "seq", "mask / layout", "ring ms", "SDPA ms", "ring/SDPA", "sent MiB/rank", "formula MiB",
               "imbalance"]  # fmt: skip
    rows, baseline = [], {}  # SDPA per (seq, causal), measured once whatever N
    for n in tqdm(sizes, disable=not main_rank(), desc="ring attention, per world size"):
        configs = [(seq, label != "full", zigzag) for seq in seqs for label, zigzag in VARIANTS if seq % (2 * n) == 0]
        res = launch(n, ring_rank, backend=args.backend, impl=args.impl, configs=configs, iters=args.iters,
                     warmup=args.warmup, **shape)[0]  # fmt: skip
        if not main_rank():
            continue
        labels = [label for seq in seqs for label, _ in VARIANTS if seq % (2 * n) == 0]
        for (seq, causal, _), label, per_rank in zip(configs, labels, res):
            if (seq, causal) not in baseline:
                baseline[seq, causal] = sdpa_seconds(seq=seq, causal=causal, iters=args.iters, warmup=args.warmup,
                                                     device=device, **shape)  # fmt: skip
            base = baseline[seq, causal]
            ring = max(r["seconds"] for r in per_rank)
            block = args.batch * args.heads * (seq // n) * args.head_dim * 4
            formula = sum(ring_bytes_formula(n, block))
            sent = max(r["sent_fwd"] + r["sent_bwd"] for r in per_rank)
            flops = [r["flops_fwd"] for r in per_rank]
            imbalance = max(flops) / (sum(flops) / len(flops))
            rows.append([n, seq, label, ring * 1e3, base * 1e3, ring / base, sent / MIB, formula / MIB, imbalance])
    if not main_rank():
        return
    print(format_table(headers, rows))
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "bench_context_parallel.csv", headers, rows)

    def draw(ax):
        for label, _ in VARIANTS:
            for n in sizes:
                pts = [(r[1], r[3]) for r in rows if r[0] == n and r[2] == label]
                if pts:
                    style = {"full": "-", "causal contiguous": "--", "causal zigzag": ":"}[label]
                    ax.plot(*zip(*pts), style, marker="o", label=f"ring N={n}, {label}")
        for causal in (False, True):
            pts = sorted((seq, t * 1e3) for (seq, c), t in baseline.items() if c == causal)
            label = "causal" if causal else "full"
            ax.plot(*zip(*pts), "k--" if causal else "k-", linewidth=2, label=f"SDPA 1 process, {label}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length")
        ax.set_ylabel("forward + backward (ms, slowest rank)")
        ax.set_title(f"ring attention vs SDPA ({args.backend}, b={args.batch}, h={args.heads}, d={args.head_dim})")
        ax.legend(fontsize=6, ncol=2)

    print(f"wrote {save_plot(args.out / 'bench_context_parallel.png', draw)}")


if __name__ == "__main__":
    main()
