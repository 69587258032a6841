"""Our expert-parallel MoE layer vs the dense MoE in one process vs its bare exchange, at several skews.

    python -m scripts.bench.expert_parallel                                 # gloo on CPU, EP 2 and 4 (~1 min)
    python -m scripts.bench.expert_parallel --impl student --world-sizes 2  # your implementation
    python -m scripts.bench.expert_parallel --tokens 4096 --d-model 512 --skews 0,0.1,0.5
    torchrun --standalone --nproc_per_node=8 -m scripts.bench.expert_parallel --backend nccl

For every EP size W and router skew s, each rank holds ``--tokens`` tokens (x ~ N(0.5, 1), so a router
row pushed along the all-ones direction attracts them) and a ``models.MoE`` whose router row 0 gets
``s * ones/sqrt(d)`` added: s = 0 routes evenly, larger s sends most tokens to expert 0, i.e. to rank 0.
It reports, for one forward + backward (median over ``--iters``, the slowest rank's):

    ep_ms        our ExpertParallelMoE (route, counts all-gather, dispatch, experts, combine; and backward)
    a2a_ms       the bare exchange alone: the same four all-to-alls with the same splits, made directly
                 with dist.all_to_all_single (the communication floor of the layer)
    dense_ms     models.MoE in one process on all W * tokens tokens (what EP spreads over W ranks)
    load         busiest expert's assignments / the mean (1 = balanced)
    MB/rank      all-to-all bytes each rank puts in per step (recorder: mean and busiest rank)
    formula      4 * n * k * d * 4 bytes: dispatch + combine, forward + backward, fp32, even routing

Under even routing every rank puts in exactly the formula's bytes ((W-1)/W of it crosses the wire);
under skew the busiest rank receives, runs and returns far more rows, and everyone waits for it.
Writes out/bench_expert_parallel.{csv,png}.
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.distributed as dist
from tqdm import tqdm

from cs336_systems.models import MoE
from scripts.bench.common import (
    add_common_args,
    format_table,
    launch,
    load_impl,
    main_rank,
    median_time,
    save_plot,
    write_csv,
)
from tests.harness.recorder import CommRecorder, calls

MB = 1e6


def _moe(d_model: int, d_ff: int, experts: int, top_k: int, skew: float, device) -> MoE:
    torch.manual_seed(0)  # the same dense layer on every rank
    moe = MoE(d_model, d_ff, experts, top_k).to(device)
    with torch.no_grad():
        moe.router.weight[0] += skew / d_model**0.5
    return moe


def _splits(moe: MoE, x_all: torch.Tensor, rank: int, world: int) -> tuple[list[int], list[int]]:
    """(input_splits, output_splits) of this rank's dispatch, from the dense router (no capacity)."""
    n, E = x_all.shape[0] // world, moe.num_experts
    chosen = moe.router(x_all).softmax(-1).topk(moe.top_k, dim=-1).indices  # (W*n, k)
    counts = torch.stack([torch.bincount(c.reshape(-1), minlength=E) for c in chosen.split(n)])  # (src, E)
    per_rank = counts.view(world, world, E // world).sum(2)  # (src, dst)
    return per_rank[rank].tolist(), per_rank[:, rank].tolist()


def bench_rank(rank: int, world_size: int, device: torch.device, impl: str, tokens: int, d_model: int, d_ff: int,
               experts: int, top_k: int, skews: list[float], iters: int) -> list[dict]:  # fmt: skip
    EP = load_impl(impl, "expert_parallel")
    if device.type == "cpu":
        torch.set_num_threads(1)  # one core per rank, as one GPU per rank
    gen = torch.Generator().manual_seed(1)
    x_all = (torch.randn(world_size * tokens, d_model, generator=gen) + 0.5).to(device)  # every rank's tokens
    x = x_all[rank * tokens : (rank + 1) * tokens].clone().requires_grad_(True)  # as inside a network
    rows = []
    for skew in tqdm(skews, disable=rank != 0, desc=f"EP {world_size}", leave=False):
        dense = _moe(d_model, d_ff, experts, top_k, skew, device)
        layer = EP.ExpertParallelMoE.from_dense(dense)

        def ep_step(layer=layer):
            layer.zero_grad(set_to_none=True)
            layer(x).square().mean().backward()

        send, recv = _splits(dense, x_all, rank, world_size)
        out_rows, in_rows = torch.empty(sum(recv), d_model, device=device), x.new_empty(sum(send), d_model)

        def exchange(out_rows=out_rows, in_rows=in_rows, send=send, recv=recv):  # the layer's four all-to-alls
            for a, b, o, i in ((out_rows, in_rows, recv, send), (in_rows, out_rows, send, recv)) * 2:
                dist.all_to_all_single(a, b, o, i)

        x_dense = x_all.clone().requires_grad_(True)

        def dense_step(dense=dense, x_dense=x_dense):
            dense.zero_grad(set_to_none=True)
            dense(x_dense).square().mean().backward()

        ep_step()  # warm up
        with CommRecorder() as rec:
            ep_step()
        a2a = sum(e.nbytes for e in calls(rec.events) if "to_all" in e.op)
        gathered = [torch.zeros(1, dtype=torch.float64, device=device) for _ in range(world_size)]
        dist.all_gather(gathered, torch.tensor([float(a2a)], dtype=torch.float64, device=device))
        chosen = dense.router(x_all).softmax(-1).topk(top_k, dim=-1).indices
        load = torch.bincount(chosen.reshape(-1), minlength=experts).float()
        row = {
            "W": world_size, "skew": skew, "load": (load.max() / load.mean()).item(),
            "ep_ms": 1e3 * median_time(ep_step, device, iters), "a2a_ms": 1e3 * median_time(exchange, device, iters),
            "dense_ms": 1e3 * median_time(dense_step, device, max(1, iters // 2)),
            "mb_mean": statistics.mean(g.item() for g in gathered) / MB,
            "mb_max": max(g.item() for g in gathered) / MB, "formula_mb": 4 * tokens * top_k * d_model * 4 / MB,
        }  # fmt: skip
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    parser.add_argument("--world-sizes", default="2,4", help="EP sizes to run standalone (default 2,4)")
    parser.add_argument("--tokens", type=int, default=1024, help="tokens per rank (default 1024)")
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--d-ff", type=int, default=256)
    parser.add_argument("--experts", type=int, default=8, help="number of experts; divisible by every EP size")
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--skews", default="0,0.1,0.2,0.5", help="router pushes toward expert 0 (0 = even)")
    parser.add_argument("--iters", type=int, default=5)
    args = parser.parse_args()
    kwargs = dict(impl=args.impl, tokens=args.tokens, d_model=args.d_model, d_ff=args.d_ff, experts=args.experts,
                  top_k=args.top_k, skews=[float(s) for s in args.skews.split(",")], iters=args.iters)  # fmt: skip
    rows = []
    for world in [int(w) for w in args.world_sizes.split(",")]:
        rows += launch(world, bench_rank, backend=args.backend, **kwargs)[0]
        if dist.is_initialized():  # under torchrun there is one world size: the one we were started with
            break
    if not main_rank():
        return
    headers = ["W", "skew", "load", "ep_ms", "a2a_ms", "dense_ms", "mb_mean", "mb_max", "formula_mb"]
    table = [[r[h] for h in headers] for r in rows]
    print(format_table(["W", "skew", "load", "EP ms", "a2a ms", "dense ms", "MB/rank mean", "MB/rank max",
                        "formula MB"], table))  # fmt: skip
    write_csv(args.out / "bench_expert_parallel.csv", headers, table)

    def draw(ax):
        for world in sorted({r["W"] for r in rows}):
            mine = [r for r in rows if r["W"] == world]
            loads = [r["load"] for r in mine]
            ax.plot(loads, [r["ep_ms"] for r in mine], "o-", label=f"EP layer, W={world}")
            ax.plot(loads, [r["a2a_ms"] for r in mine], "s--", label=f"bare all-to-alls, W={world}")
            ax.plot(loads, [r["dense_ms"] for r in mine], "^:", label=f"dense MoE, 1 process, W*n tokens (W={world})")
        ax.set_xlabel("busiest expert's load / mean load (router skew)")
        ax.set_ylabel("forward + backward (ms)")
        ax.set_title(f"MoE: {args.tokens} tokens/rank, d={args.d_model}, E={args.experts}, top-{args.top_k}")
        ax.legend(fontsize=7)

    print(f"wrote {save_plot(args.out / 'bench_expert_parallel.png', draw)}")


if __name__ == "__main__":
    main()
