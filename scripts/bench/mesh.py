"""DP, TP and PP composed on 8 ranks: step time and bytes per axis against the formulas (handouts/07-mesh.md).

    python -m scripts.bench.mesh                                  # gloo on CPU, 8 processes (~1-2 min)
    python -m scripts.bench.mesh --impl student --steps 3         # your mesh.py
    python -m scripts.bench.mesh --layers 8 --d-model 512 --batch 128
    torchrun --standalone --nproc_per_node=8 -m scripts.bench.mesh --backend nccl

Trains the same ``DeepMLP`` (fp32, SGD) with ``MeshTrainer`` on DP 8, DP 2 x TP 4, DP 2 x PP 4 and
DP 2 x PP 2 x TP 2, and with our ``HSDP`` against torch's ``fully_shard`` on the same 2 x 4 device mesh.
For each scheme it reports the step time (median over steps, slowest rank) and, summed over ranks,
the bytes sent on each axis in one step next to the formulas of §7.3: tp 2 * L_s * m ring all-reduces
of a microbatch's activations A (2(t-1)/t * A each), pp m activations forward and m gradients back
(A each, first and last stages one way only), dp one ring all-reduce of the stage's gradients.
Collective bytes are the ring's (what each rank sends); point-to-point bytes are what was sent.
Writes out/bench_mesh.{csv,png}.
"""

from __future__ import annotations

import argparse
import math
import warnings

import torch
from torch import nn

from cs336_systems.models import DeepMLP
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

SCHEMES = {
    "dp8": {"dp": 8, "pp": 1, "tp": 1},
    "dp2 x tp4": {"dp": 2, "pp": 1, "tp": 4},
    "dp2 x pp4": {"dp": 2, "pp": 4, "tp": 1},
    "dp2 x pp2 x tp2": {"dp": 2, "pp": 2, "tp": 2},
}
RING_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather_into_tensor": lambda n: (n - 1) / n,
               "reduce_scatter_tensor": lambda n: (n - 1) / n}  # fmt: skip


def _slice(rank: int, shape: dict[str, int], axis: str) -> tuple[int, ...]:
    """Ranks sharing every coordinate but ``axis`` with ``rank`` (row-major, last axis fastest)."""
    strides, s = {}, 1
    for a in reversed(list(shape)):
        strides[a] = s
        s *= shape[a]
    mine = rank // strides[axis] % shape[axis]
    return tuple(rank + (i - mine) * strides[axis] for i in range(shape[axis]))


def _bytes_per_axis(events, rank: int, shape: dict[str, int]) -> dict[str, float]:
    out = dict.fromkeys(shape, 0.0)
    for e in calls(events):
        if e.op in ("isend", "send"):
            out["pp"] += e.nbytes if e.dtype != "int64" else 0  # not the few bytes of the shape header
            continue
        for axis in shape:
            if e.group_ranks == _slice(rank, shape, axis) and e.op in RING_FACTOR:
                n = len(e.group_ranks)
                full = e.nbytes * (n if e.op == "all_gather_into_tensor" else 1)
                out[axis] += RING_FACTOR[e.op](n) * full
                break
    return out


def _formula(rank: int, shape: dict[str, int], args, stage_numel: int) -> dict[str, float]:
    """Bytes this rank should send per step on each axis (§7.3), fp32."""
    tp, pp, dp = shape["tp"], shape["pp"], shape["dp"]
    stage = rank // tp % pp
    m = args.microbatches
    act = args.batch // dp // m * args.d_model * 4  # one microbatch's activations, bytes
    n = args.layers + 1  # the blocks and the head, split as split_into_stages does
    sizes = [n // pp + (s < n % pp) for s in range(pp)]
    start = sum(sizes[:stage])
    blocks = sum(1 for i in range(start, start + sizes[stage]) if i < args.layers)  # TP MLP blocks on this stage
    return {
        "tp": 2 * blocks * m * 2 * (tp - 1) / tp * act,
        "pp": (stage < pp - 1) * m * act + (stage > 0) * m * act,
        "dp": 2 * (dp - 1) / dp * stage_numel * 4,
    }


def trainer_rank(rank: int, world_size: int, device, *, impl: str, args) -> dict:
    warnings.filterwarnings("ignore", category=FutureWarning)  # torch renaming collectives, once per rank
    M = load_impl(impl, "mesh")
    results = {}
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(args.batch, args.d_model, generator=g), torch.randn(args.batch, args.d_model, generator=g)
    for name, shape in SCHEMES.items():
        torch.manual_seed(0)
        model = DeepMLP(args.layers, args.d_model, 4 * args.d_model).to(device)
        mesh = M.ProcessMesh(shape)
        trainer = M.MeshTrainer(model, mesh, nn.MSELoss(), torch.optim.SGD, num_microbatches=args.microbatches,
                                lr=0.01)  # fmt: skip
        dp = mesh.rank("dp")
        n = args.batch // shape["dp"]
        xs, ys = x[dp * n : (dp + 1) * n].to(device), y[dp * n : (dp + 1) * n].to(device)
        trainer.train_step(xs, ys)  # warm-up
        with CommRecorder() as rec:
            trainer.train_step(xs, ys)
        seconds = median_time(lambda trainer=trainer, xs=xs, ys=ys: trainer.train_step(xs, ys), device, args.steps)
        numel = sum(p.numel() for p in trainer.module.parameters())
        results[name] = {"time": seconds, "bytes": _bytes_per_axis(rec.events, rank, shape),
                         "formula": _formula(rank, shape, args, numel)}  # fmt: skip
    results.update(_hsdp(rank, M, args, device, x, y))
    return results


def _hsdp(rank: int, M, args, device, x, y) -> dict:
    """Our HSDP and torch's fully_shard on the same 2 x 4 (replicate x shard) mesh: step time."""
    out = {}
    n = args.batch // 8
    xs, ys = x[rank * n : (rank + 1) * n].to(device), y[rank * n : (rank + 1) * n].to(device)

    def step_time(model) -> float:
        opt = torch.optim.SGD(model.parameters(), lr=0.01)

        def step():
            opt.zero_grad()
            nn.functional.mse_loss(model(xs), ys).backward()
            opt.step()

        return median_time(step, device, args.steps, warmup=1)

    torch.manual_seed(0)
    mesh = M.ProcessMesh({"replicate": 2, "shard": 4})
    ours = M.HSDP(DeepMLP(args.layers, args.d_model, 4 * args.d_model).to(device), mesh, "shard", "replicate")
    out["HSDP 2 x 4 (ours)"] = {"time": step_time(ours)}
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        torch.manual_seed(0)
        model = DeepMLP(args.layers, args.d_model, 4 * args.d_model).to(device)
        torch_mesh = init_device_mesh(device.type, (2, 4), mesh_dim_names=("replicate", "shard"))
        for block in model:
            fully_shard(block, mesh=torch_mesh)
        fully_shard(model, mesh=torch_mesh)
        out["HSDP 2 x 4 (torch fully_shard)"] = {"time": step_time(model)}
    except Exception as exc:  # noqa: BLE001 - torch's FSDP2 on gloo/CPU varies by version: report, do not fail
        out["HSDP 2 x 4 (torch fully_shard)"] = {"time": math.nan, "error": f"{type(exc).__name__}: {exc}"[:100]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    parser.add_argument("--layers", type=int, default=4, help="MLP blocks of the DeepMLP (default 4)")
    parser.add_argument("--d-model", type=int, default=256, help="width d_model; d_ff = 4 d_model (default 256)")
    parser.add_argument("--batch", type=int, default=64, help="global batch (default 64)")
    parser.add_argument("--microbatches", type=int, default=4, help="pipeline microbatches m (default 4)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per scheme (default 5)")
    args = parser.parse_args()
    deepest = max(shape["pp"] for shape in SCHEMES.values())
    if args.layers + 1 < deepest:  # every pipeline stage needs a module of DeepMLP (its blocks and head)
        parser.error(f"--layers {args.layers} gives {args.layers + 1} modules (blocks and head), fewer than the "
                     f"{deepest} pipeline stages of the deepest scheme: use --layers >= {deepest - 1}")  # fmt: skip
    results = launch(8, trainer_rank, backend=args.backend, impl=args.impl, args=args)
    if not main_rank():
        return
    headers = ["scheme", "step ms (slowest rank)", "tp MB", "tp formula", "pp MB", "pp formula", "dp MB", "dp formula"]
    rows = []
    for name in results[0]:
        per_rank = [r[name] for r in results]
        row = [name, 1e3 * max(r["time"] for r in per_rank)]
        for axis in ("tp", "pp", "dp"):
            if "bytes" in per_rank[0]:
                row += [sum(r["bytes"][axis] for r in per_rank) / 1e6, sum(r["formula"][axis] for r in per_rank) / 1e6]
            else:
                row += ["", ""]
        rows.append(row)
        if "error" in per_rank[0]:
            print(f"{name}: {per_rank[0]['error']}")
    print(format_table(headers, rows, floatfmt=".3f"))
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "bench_mesh.csv", headers, rows)

    def draw(ax):
        names = [r[0] for r in rows]
        ax.barh(names, [r[1] for r in rows], color="tab:blue")
        ax.set_xlabel("step time, ms (slowest rank)")
        ax.set_title(f"DeepMLP({args.layers}, {args.d_model}) on 8 ranks, batch {args.batch}, m = {args.microbatches}")

    print(f"wrote {save_plot(args.out / 'bench_mesh.png', draw)} and {args.out / 'bench_mesh.csv'}")


if __name__ == "__main__":
    main()
