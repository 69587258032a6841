"""Our tensor-parallel MLP vs torch's own (DTensor ColwiseParallel/RowwiseParallel), in the same run.

    python -m scripts.bench.tensor_parallel                               # gloo on CPU, TP 1, 2, 4 (~1 min)
    python -m scripts.bench.tensor_parallel --impl student --tp-sizes 2   # your implementation
    python -m scripts.bench.tensor_parallel --d-model 2048 --seq 1024 --iters 20     # a bigger MLP
    torchrun --standalone --nproc_per_node=8 -m scripts.bench.tensor_parallel --backend nccl --tp-sizes 1,2,4,8

For every TP size T and both variants (plain TP; TP + sequence parallelism) it trains the same
``models.MLP`` (fp32, SGD) with our ``TensorParallelMLP`` and with torch's tensor-parallel API and
reports, per rank: parameter bytes, the collectives of one training step and the bytes each rank
sends for them (a ring moves 2(T-1)/T*M for an all-reduce of M bytes, (T-1)/T*M for an all-gather or
reduce-scatter whose full tensor is M), the formula 4(T-1)/T*M for an activation of M = s*b*d*4 bytes,
and the step time (median; the slowest rank's). Ours is seen by the test suite's CommRecorder,
torch's by a dispatch mode on its functional collectives. Under torchrun every T that divides the
world size runs on a (world/T) x T device mesh: TP inside the "tp" dim, replicas across the other.
Writes out/bench_tensor_parallel.{csv,png}.
"""

from __future__ import annotations

import argparse
import copy
import statistics

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.utils._python_dispatch import TorchDispatchMode
from tqdm import tqdm

from cs336_systems.models import MLP
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
from tests.harness.recorder import CommRecorder, calls

MIB = float(1 << 20)
KINDS = ("all_reduce", "all_gather", "reduce_scatter")


def _kind(op: str) -> str | None:
    op = op.lower().replace("_", "")
    return next((k for k in KINDS if k.replace("_", "") in op), None)


def ring_bytes_sent(kind: str, nbytes: int, tp: int) -> float:
    """Bytes one rank sends in a ring collective whose *input* on that rank is ``nbytes``."""
    if kind == "all_reduce":
        return 2 * (tp - 1) / tp * nbytes  # accounting.ring_all_reduce_bytes_per_rank
    if kind == "all_gather":
        return (tp - 1) * nbytes  # input is one shard: (T-1)/T of the gathered tensor
    return (tp - 1) / tp * nbytes  # reduce_scatter: input is the full tensor


class FuncolRecorder(TorchDispatchMode):
    """(kind, input bytes) of every functional collective DTensor issues (it bypasses ProcessGroup's
    Python methods, so CommRecorder does not see it)."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "_c10d_functional" and (kind := _kind(func._overloadpacket.__name__)):
            self.events.append((kind, args[0].numel() * args[0].element_size()))
        return func(*args, **(kwargs or {}))


def _torch_tp(dense: MLP, mesh, sequence_parallel: bool) -> MLP:
    """torch's Megatron-style plan on the "tp" mesh dim; SP keeps activations Shard(0) outside."""
    if sequence_parallel:
        plan = {"fc1": ColwiseParallel(input_layouts=Shard(0)), "fc2": RowwiseParallel(output_layouts=Shard(0))}
    else:
        plan = {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
    return parallelize_module(dense, mesh, plan)


def _local_numel(p: torch.Tensor) -> int:
    return p.to_local().numel() if hasattr(p, "to_local") else p.numel()


def bench_rank(rank: int, world_size: int, device: torch.device, impl: str, tp_sizes: list[int], seq: int,
               batch: int, d_model: int, d_ff: int, iters: int) -> list[dict]:  # fmt: skip
    TP = load_impl(impl, "tensor_parallel")
    if device.type == "cpu":
        torch.set_num_threads(1)  # one core per rank, as one GPU per rank: T ranks get T times the compute
    rows = []
    for tp in [t for t in tp_sizes if world_size % t == 0]:
        mesh = init_device_mesh(device.type, (world_size // tp, tp), mesh_dim_names=("dp", "tp"))["tp"]
        group, tp_rank = mesh.get_group(), mesh.get_local_rank()
        for sp in tqdm((False, True), disable=rank != 0, desc=f"TP {tp}", leave=False):
            torch.manual_seed(0)  # the same dense MLP and data on every rank
            dense = MLP(d_model, d_ff).to(device)
            x = torch.randn(seq, batch, d_model, device=device)  # (s, b, d)
            # SP: this rank's rows of the sequence. requires_grad as for a layer inside a network: the
            # first layer's input needs no gradient, and autograd would skip f's backward all-reduce.
            x_local = (x.chunk(tp)[tp_rank] if sp else x).detach().requires_grad_(True)
            ours = TP.TensorParallelMLP.from_dense(dense, group, sequence_parallel=sp)
            theirs = _torch_tp(copy.deepcopy(dense), mesh, sp)  # shards the same weights
            row = {"tp": tp, "variant": "TP+SP" if sp else "TP", "act_bytes": x.numel() * 4}
            steps = {}
            for name, model in (("ours", ours), ("torch", theirs)):
                opt = torch.optim.SGD(model.parameters(), lr=1e-3)

                def step(model=model, opt=opt, x_local=x_local):
                    opt.zero_grad(set_to_none=True)
                    model(x_local).square().mean().backward()
                    opt.step()

                step(), step()  # warm up (allocations, DTensor's plan caches), then record one step
                if name == "ours":
                    with CommRecorder() as rec:
                        step()
                    events = [(_kind(e.op), e.nbytes) for e in calls(rec.events)]
                else:
                    with FuncolRecorder() as rec:
                        step()
                    events = rec.events
                row[f"{name}_param_bytes"] = sum(_local_numel(p) * 4 for p in model.parameters())
                row[f"{name}_colls"] = " + ".join(f"{sum(k == kd for k, _ in events)} {kd}" for kd in KINDS
                                                  if any(k == kd for k, _ in events)) or "none"  # fmt: skip
                row[f"{name}_sent"] = sum(ring_bytes_sent(k, b, tp) for k, b in events if k)
                steps[name] = step
            # Interleave the two in rounds so that machine noise hits both alike.
            times = {name: [] for name in steps}
            for _ in range(3):
                for name, step in steps.items():
                    times[name].append(median_time(step, device, max(1, iters // 3), group=group))
            row.update({f"{name}_time": statistics.median(t) for name, t in times.items()})
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    parser.add_argument("--tp-sizes", default="1,2,4", help="TP sizes (standalone: one run of T processes each)")
    parser.add_argument("--seq", type=int, default=128, help="sequence length s (dim 0; divisible by every T)")
    parser.add_argument("--batch", type=int, default=4, help="batch b (dim 1)")
    parser.add_argument("--d-model", type=int, default=512, help="model width d")
    parser.add_argument("--d-ff", type=int, default=2048, help="MLP hidden width (divisible by every T)")
    parser.add_argument("--iters", type=int, default=6, help="timed steps per configuration (in 3 rounds)")
    args = parser.parse_args()
    tp_sizes = [int(t) for t in args.tp_sizes.split(",")]
    shape = dict(seq=args.seq, batch=args.batch, d_model=args.d_model, d_ff=args.d_ff, iters=args.iters)
    if under_torchrun():
        rows = launch(0, bench_rank, backend=args.backend, impl=args.impl, tp_sizes=tp_sizes, **shape)[0]
    else:
        runs = [launch(t, bench_rank, backend=args.backend, impl=args.impl, tp_sizes=[t], **shape) for t in tp_sizes]
        rows = [r for run in runs for r in run[0]]
    if not main_rank():
        return
    report(rows, args)


def report(rows: list[dict], args) -> None:
    headers = ["T", "variant", "params MiB/rank ours", "torch", "collectives/step ours", "torch",
               "sent MiB/rank ours", "torch", "formula 4(T-1)/T*M", "step ms ours", "torch",
               "time ours/torch"]  # fmt: skip
    table = []
    for r in rows:
        formula = 4 * (r["tp"] - 1) / r["tp"] * r["act_bytes"]
        table.append([r["tp"], r["variant"], r["ours_param_bytes"] / MIB, r["torch_param_bytes"] / MIB,
                      r["ours_colls"], r["torch_colls"], r["ours_sent"] / MIB, r["torch_sent"] / MIB, formula / MIB,
                      r["ours_time"] * 1e3, r["torch_time"] * 1e3, r["ours_time"] / r["torch_time"]])  # fmt: skip
    print(f"\nMLP d_model={args.d_model} d_ff={args.d_ff}, activation (s={args.seq}, b={args.batch}, d) fp32, "
          f"backend {args.backend}, impl {args.impl}; M = {rows[0]['act_bytes'] / MIB:.3g} MiB\n")  # fmt: skip
    print(format_table(headers, table))
    csv_path = args.out / "bench_tensor_parallel.csv"
    write_csv(csv_path, headers, table)

    def draw(ax) -> None:
        tps = sorted({r["tp"] for r in rows})
        m = rows[0]["act_bytes"] / MIB
        ts = torch.linspace(1, max(tps), 50)
        ax.plot(ts, 4 * (ts - 1) / ts * m, "k--", label="formula 4(T-1)/T·M")
        for variant, marker in (("TP", "o"), ("TP+SP", "s")):
            sel, sp_ = [r for r in rows if r["variant"] == variant], variant == "TP+SP"
            ax.plot([r["tp"] for r in sel], [r["ours_sent"] / MIB for r in sel], marker, ms=9, mfc="none",
                    label=f"ours, {variant}")  # fmt: skip
            ax.plot([r["tp"] for r in sel], [r["torch_sent"] / MIB for r in sel], "x" if sp_ else "+", ms=8,
                    label=f"torch DTensor, {variant}")  # fmt: skip
        ax.set_xticks(tps)
        ax.set_xlabel("tensor-parallel size T")
        ax.set_ylabel("MiB sent per rank per training step")
        ax.set_title(f"TP MLP communication per rank (activation M = {m:.3g} MiB)")
        ax.legend()

    print(f"\nwrote {save_plot(args.out / 'bench_tensor_parallel.png', draw)} and {csv_path}")


if __name__ == "__main__":
    main()
