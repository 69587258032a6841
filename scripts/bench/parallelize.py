"""Your 4-D transformer against torch's own composition: tokens per second and peak memory (handouts/11-capstone.md).

    python -m scripts.bench.parallelize                          # gloo on CPU, 2 then 4 processes (~1 min)
    python -m scripts.bench.parallelize --impl student --steps 8
    python -m scripts.bench.parallelize --schemes pp2,pp2xfsdp2 --schedule interleaved --microbatches 8
    python -m scripts.bench.parallelize --d-model 256 --layers 4 --batch 16 --seq 128
    torchrun --standalone --nproc_per_node=2 -m scripts.bench.parallelize --backend nccl   # the 2-rank rows
    torchrun --standalone --nproc_per_node=4 -m scripts.bench.parallelize --backend nccl   # the 4-rank rows

On the same ``transformer.Transformer``, the same batch and the same mesh, it times one AdamW step of
``parallelize(model, mesh).train_step`` (your parts) against torch's own pieces doing the same:

    dp2        parallelize data_parallel="ddp"   vs  torch.nn.parallel.DistributedDataParallel
    fsdp2      parallelize data_parallel="fsdp"  vs  torch.distributed.fsdp.fully_shard on every block
    tp2        parallelize (TP + SP, Part 4)     vs  DTensor parallelize_module (Colwise/Rowwise, no SP)
    pp2        parallelize, Part 5's schedule    vs  torch.distributed.pipelining: PipelineStages cut by hand
               (--schedule, --microbatches)          (no tracing; embedding on the first, head on the last),
                                                     Schedule1F1B, ScheduleGPipe or ScheduleInterleaved1F1B
                                                     (2 stages per rank) with the same microbatches and the
                                                     loss_fn on the last stage
    tp2xfsdp2  mesh dp2 x tp2, "fsdp" (4 ranks)  vs  a 2-D DeviceMesh ("dp", "tp"): parallelize_module on "tp",
                                                     then fully_shard on "dp" (torch's 2-D recipe)
    pp2xfsdp2  mesh dp2 x pp2, "fsdp" (4 ranks)  vs  a 2-D DeviceMesh ("dp", "pp"): each stage fully_shard-ed
                                                     on "dp", pipelined on "pp" (torchtitan's recipe)

The 2-rank schemes run in one launch, the 4-rank ones in a second (fresh processes). Both sides start from
the same seed and batch, so their losses at the first two steps must agree (the first: the same forward;
the second: the same gradients and AdamW update too): the table is followed by the checked losses, or a
WARNING line with both sides' values when they differ (the two would not compute the same thing).
Rounds alternate ours and theirs so both meet the same spells of the machine; the table gives tokens per
second (the whole batch's tokens / the slowest rank's step time), the ranks' peak resident memory (the
process's maximum RSS so far, after ours and torch's runs of this mesh and the meshes above it in the same
launch: parameters, gradients, optimizer state, activations and the runtime; on CPU a coarse upper bound),
and the ratio theirs/ours of step times with a 90% bootstrap interval (>1: ours is faster). On CUDA the
memory column is ``torch.cuda.max_memory_allocated`` during the scheme's two runs and a last column gives our run's MFU
(``accounting.mfu``: 6ND FLOPs per token against ``--peak-tflops`` per GPU; not yet run on a GPU).
The default took 60 s on a quiet 2-core machine. Writes out/bench_parallelize.{csv,png}.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import statistics
import warnings

import torch
import torch.distributed as dist

from cs336_systems.transformer import Transformer, TransformerConfig, lm_loss
from scripts.bench.common import (
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

# name -> (our mesh, our parallelize options); the world size is the mesh's size
SCHEMES = {
    "dp2": ({"dp": 2, "pp": 1, "cp": 1, "tp": 1}, {"data_parallel": "ddp"}),
    "fsdp2": ({"dp": 2, "pp": 1, "cp": 1, "tp": 1}, {"data_parallel": "fsdp"}),
    "tp2": ({"dp": 1, "pp": 1, "cp": 1, "tp": 2}, {}),
    "pp2": ({"dp": 1, "pp": 2, "cp": 1, "tp": 1}, {"pipelined": True}),
    "tp2xfsdp2": ({"dp": 2, "pp": 1, "cp": 1, "tp": 2}, {"data_parallel": "fsdp"}),
    "pp2xfsdp2": ({"dp": 2, "pp": 2, "cp": 1, "tp": 1}, {"data_parallel": "fsdp", "pipelined": True}),
}


def _world(scheme: str) -> int:
    return math.prod(SCHEMES[scheme][0].values())


def _unfit(scheme: str, args) -> str | None:
    """Why ``scheme`` cannot run at these sizes (checked before any rank starts), or None."""
    shape, options = SCHEMES[scheme]
    microbatches = args.microbatches if options.get("pipelined") else 1
    if args.batch % (shape["dp"] * microbatches):
        return f"--batch ({args.batch}) must be divisible by dp·microbatches ({shape['dp']}·{microbatches})"
    stages = shape["pp"] * (2 if options.get("pipelined") and args.schedule == "interleaved" else 1)
    if args.layers % stages:
        return f"--layers ({args.layers}) must be divisible by the number of stages ({stages})"
    return None


def _peak_mb(device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _ours(P, M, scheme: str, cfg, device, args):
    shape, options = SCHEMES[scheme]
    options = dict(options)
    if options.pop("pipelined", False):
        options.update(num_microbatches=args.microbatches, schedule=args.schedule)
        if args.schedule == "interleaved":
            options["num_chunks"] = 2
    model = Transformer(cfg, seed=0).to(device)
    pt = P.parallelize(model, M.ProcessMesh(shape), lr=1e-3, **options)
    return pt.train_step  # the whole batch on every rank; the mean loss on the last stage, else None


def _tp_plan(model) -> dict:
    """Megatron's split as DTensor styles: QKV and gate/up by columns, wo and down by rows (no SP)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan = {}
    for name, child in model.named_children():
        if name.startswith("block"):
            plan.update({f"{name}.attn.{w}": ColwiseParallel() for w in ("wq", "wk", "wv")})
            plan[f"{name}.attn.wo"] = RowwiseParallel()
            if hasattr(child.ffn, "w_gate"):
                plan.update({f"{name}.ffn.w_gate": ColwiseParallel(), f"{name}.ffn.w_up": ColwiseParallel(),
                             f"{name}.ffn.w_down": RowwiseParallel()})  # fmt: skip
    return plan


def _fully_shard(model, mesh) -> None:
    from torch.distributed.fsdp import fully_shard

    for name, child in model.named_children():
        if name.startswith("block"):
            fully_shard(child, mesh=mesh)
    fully_shard(model, mesh=mesh)


def _pipelined(model, cfg, device, args, mesh=None):
    """torch.distributed.pipelining over 2 ranks, stages cut by hand (no tracing): the blocks in 2·v
    stages of as many each (v = 2 chunks per rank for --schedule interleaved, else 1), the embedding on
    stage 0 and the head on the last; pp rank r holds stages r, r + 2, ... (as ours). The schedule runs
    ``--microbatches`` microbatches with the loss on the last stage, as ours does. Shapes between the
    stages are inferred from the first microbatch (one extra metadata exchange on the first step). With
    a 2-D ``mesh`` ("dp", "pp"), each stage is also fully_shard-ed over "dp" and trains on its dp rank's rows."""
    from collections import OrderedDict

    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

    pp_rank = dist.get_rank() if mesh is None else mesh.get_local_rank("pp")
    chunks = 2 if args.schedule == "interleaved" else 1
    total = 2 * chunks
    layers = list(model.named_children())  # embed, block0 .. block{L-1}, head
    per = cfg.n_layers // total
    group = None if mesh is None else mesh.get_group("pp")
    stages, parts = [], []
    for index in range(pp_rank, total, 2):
        start = 0 if index == 0 else 1 + index * per
        stop = None if index == total - 1 else 1 + (index + 1) * per
        part = torch.nn.Sequential(OrderedDict(layers[start:stop]))
        if mesh is not None:
            _fully_shard(part, mesh["dp"])
        stages.append(PipelineStage(part, index, total, device, group=group))
        parts.append(part)
    # scale_grads (the default) divides each microbatch's gradient by their number: the batch mean, as ours
    if chunks > 1:
        pipe = ScheduleInterleaved1F1B(stages, n_microbatches=args.microbatches, loss_fn=lm_loss)
    else:
        schedule = {"1f1b": Schedule1F1B, "gpipe": ScheduleGPipe}[args.schedule]
        pipe = schedule(stages[0], n_microbatches=args.microbatches, loss_fn=lm_loss)
    opt = torch.optim.AdamW([p for part in parts for p in part.parameters()], lr=1e-3)
    dp, replica = (1, 0) if mesh is None else (mesh["dp"].size(), mesh.get_local_rank("dp"))

    def step(x, y):
        n = x.shape[0] // dp  # each dp rank its rows of the batch, as parallelize does
        x, y = x[replica * n : (replica + 1) * n], y[replica * n : (replica + 1) * n]
        opt.zero_grad(set_to_none=True)
        losses = []
        if pp_rank == 0:  # pp rank 0 holds the first stage, pp rank 1 the last
            pipe.step(x)
        else:
            pipe.step(target=y, losses=losses)
        opt.step()
        return torch.stack(losses).mean().item() if losses else None

    return step


def _theirs(scheme: str, cfg, device, rank: int, args):
    from torch.distributed.device_mesh import init_device_mesh

    model = Transformer(cfg, seed=0).to(device)
    dp = SCHEMES[scheme][0]["dp"]
    if scheme == "pp2":
        return _pipelined(model, cfg, device, args)
    if scheme == "pp2xfsdp2":  # torchtitan's recipe: FSDP within each stage, the stages pipelined
        mesh = init_device_mesh(device.type, (2, 2), mesh_dim_names=("dp", "pp"))  # row-major, as ProcessMesh
        return _pipelined(model, cfg, device, args, mesh)
    if scheme == "dp2":
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model)
    elif scheme == "fsdp2":
        _fully_shard(model, init_device_mesh(device.type, (2,)))
    elif scheme == "tp2":
        from torch.distributed.tensor.parallel import parallelize_module

        parallelize_module(model, init_device_mesh(device.type, (2,)), _tp_plan(model))
    else:  # tp2xfsdp2: TP within pairs of ranks, FSDP across them (torch's 2-D recipe)
        from torch.distributed.tensor.parallel import parallelize_module

        mesh = init_device_mesh(device.type, (2, 2), mesh_dim_names=("dp", "tp"))  # row-major, as ProcessMesh
        parallelize_module(model, mesh["tp"], _tp_plan(model))
        _fully_shard(model, mesh["dp"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tp = SCHEMES[scheme][0]["tp"]
    replica = rank // tp  # this rank's dp coordinate (row-major mesh, tp fastest)

    def step(x, y):
        n = x.shape[0] // dp  # each dp rank its rows of the batch, as parallelize does
        x, y = x[replica * n : (replica + 1) * n], y[replica * n : (replica + 1) * n]
        opt.zero_grad(set_to_none=True)
        loss = lm_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()  # the mean over this rank's rows

    return step


def _mean_loss(loss: float | None, world_size: int) -> float:
    """The batch's mean loss from every rank's value (None: a rank without the loss): the mean of the
    values given. Ranks hold the whole batch's mean or their dp replica's (equal rows each)."""
    values = [None] * world_size
    dist.all_gather_object(values, loss)
    values = [v for v in values if v is not None]
    return sum(values) / len(values)


def bench_rank(rank: int, world_size: int, device, *, impl: str, schemes, args) -> dict:
    warnings.filterwarnings("ignore")  # torch's FutureWarnings (collective names, DTensor), once per rank
    P, M = load_impl(impl, "parallelize"), load_impl(impl, "mesh")
    cfg = _config(args)
    g = torch.Generator().manual_seed(0)
    rows = torch.randint(0, cfg.vocab_size, (args.batch, args.seq + 1), generator=g)
    x, y = rows[:, :-1].to(device), rows[:, 1:].to(device)
    out = {}
    for scheme in schemes:
        runs = {}
        if device.type == "cuda":  # the memory column: this scheme's peak, not the process's so far
            torch.cuda.reset_peak_memory_stats(device)
        try:
            runs["ours"] = _ours(P, M, scheme, cfg, device, args)
        except Exception as exc:  # noqa: BLE001 - a stub raises NotImplementedError: report, go on
            out[scheme] = {"error": f"ours: {type(exc).__name__}: {exc}"[:120]}
            continue
        try:
            runs["torch"] = _theirs(scheme, cfg, device, rank, args)
        except Exception as exc:  # noqa: BLE001 - torch's composition on gloo/CPU varies by version
            out[scheme] = {"error": f"torch: {type(exc).__name__}: {exc}"[:120]}
        times = {name: [] for name in runs}
        first = {name: [] for name in runs}
        for r in range(args.warmup + args.steps):
            for name, step in runs.items():  # interleaved: both meet the same spell of the machine
                loss = []
                t = timed(lambda step=step, loss=loss: loss.append(step(x, y)), device)
                if r < 2:  # step 1: the same forward; step 2: the same gradients and update too
                    first[name].append(_mean_loss(loss[0], world_size))
                if r >= args.warmup:
                    times[name].append(t)
        peak = torch.tensor([_peak_mb(device)], dtype=torch.float64, device=device)
        dist.all_reduce(peak, op=dist.ReduceOp.MAX)  # every rank knows the max (under torchrun, rank 0 prints)
        out.setdefault(scheme, {}).update({"times": times, "peak_mb": peak.item(), "first_loss": first})
    return out


def _config(args) -> TransformerConfig:
    return TransformerConfig(vocab_size=64, d_model=args.d_model, n_layers=args.layers, n_heads=args.heads,
                             n_kv_heads=args.kv_heads, d_ff=args.d_ff)  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap)
    ap.add_argument("--schemes", default=",".join(SCHEMES),
                    help=f"comma-separated, from {', '.join(SCHEMES)} (default all)")  # fmt: skip
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--d-ff", type=int, default=384)
    ap.add_argument("--batch", type=int, default=8, help="whole batch, sequences (default 8)")
    ap.add_argument("--seq", type=int, default=128, help="tokens per sequence (default 128)")
    ap.add_argument("--microbatches", type=int, default=4, help="pp2: microbatches per step, both (default 4)")
    ap.add_argument("--schedule", default="1f1b", choices=["1f1b", "gpipe", "interleaved"],
                    help="pp2: both; interleaved: 2 chunks per rank (default 1f1b)")  # fmt: skip
    ap.add_argument("--steps", type=int, default=20, help="timed rounds (default 20: intervals of a few %%)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument(
        "--peak-tflops",
        type=float,
        default=989.0,
        help="on GPU: the peak for the MFU column (default 989, H100 dense bf16; fp32 runs: use ~67)",
    )
    args = ap.parse_args(argv)
    schemes = [s for s in args.schemes.split(",") if s]
    unknown = [s for s in schemes if s not in SCHEMES]
    if unknown:
        ap.error(f"--schemes: unknown {unknown}; choose from {list(SCHEMES)}")
    speaks = os.environ.get("RANK", "0") == "0"  # before any process group: torchrun's rank 0, or standalone
    for scheme in list(schemes):
        reason = _unfit(scheme, args)
        if reason:
            schemes.remove(scheme)
            if speaks:
                print(f"skipping {scheme}: {reason}")
    if under_torchrun():  # one world size per launch: the schemes of this many ranks
        world = int(os.environ["WORLD_SIZE"])
        skipped = [s for s in schemes if _world(s) != world]
        schemes = [s for s in schemes if _world(s) == world]
        if skipped and speaks:
            print(f"skipping {skipped}: they need another --nproc_per_node")
    results = {}
    for world in sorted({_world(s) for s in schemes}):  # one launch per world size, fresh processes
        mine = [s for s in schemes if _world(s) == world]
        ranks = launch(world, bench_rank, backend=args.backend, impl=args.impl, schemes=mine, args=args)
        results.update({s: [r[s] for r in ranks] for s in mine})
    if not main_rank():
        return 0
    tokens = args.batch * args.seq
    headers = [
        "mesh",
        "ours tok/s",
        "torch tok/s",
        "torch/ours time",
        "90% interval",
        "peak RSS MB (max rank, process so far)",
    ]
    gpu = args.backend == "nccl"
    if gpu:  # MFU of our run from the accounting's 6ND FLOPs (Part 6), against --peak-tflops per GPU
        headers = [*headers[:-1], "peak MB (max rank)", "ours MFU"]
        num_params = sum(p.numel() for p in Transformer(_config(args)).parameters())
        accounting = load_impl(args.impl, "accounting")
    rows, agree = [], []
    for scheme in schemes:
        r0 = results[scheme][0]
        if "times" not in r0:
            rows.append([scheme, r0.get("error", "?"), "", "", "", ""])
            continue
        first = r0["first_loss"]
        if "torch" in first:
            pairs = list(zip(first["ours"], first["torch"]))
            if all(math.isclose(a, b, rel_tol=1e-4) for a, b in pairs):
                agree.append(f"{scheme} " + " ".join(f"{a:.5f}" for a, _ in pairs))
            else:
                print(f"WARNING {scheme}: the losses of the first steps differ, ours "
                      f"{' '.join(f'{a:.7f}' for a, _ in pairs)}, torch {' '.join(f'{b:.7f}' for _, b in pairs)}:"
                      " the two runs do not compute the same thing")  # fmt: skip
        ours = r0["times"]["ours"]
        theirs = r0["times"].get("torch")
        peak = results[scheme][0]["peak_mb"]  # already the max over ranks
        row = [scheme, tokens / statistics.median(ours)]
        if theirs:
            low, high = ratio_interval(theirs, ours)
            row += [tokens / statistics.median(theirs), statistics.median(theirs) / statistics.median(ours),
                    f"[{low:.2f}, {high:.2f}]"]  # fmt: skip
        else:
            row += [math.nan, math.nan, r0.get("error", "")]
        row.append(peak)
        if gpu:  # the GPUs share the work: the per-GPU rate is the scheme's share of the tokens
            row.append(accounting.mfu(row[1] / _world(scheme), num_params, args.peak_tflops * 1e12))
        rows.append(row)
    print(format_table(headers, rows, floatfmt=".3g"))
    if agree:
        print(f"losses of the first steps, ours = torch (rel. 1e-4): {', '.join(agree)}")
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "bench_parallelize.csv", headers, rows)

    def draw(ax):
        names = [r[0] for r in rows if isinstance(r[1], float)]
        ours = [r[1] for r in rows if isinstance(r[1], float)]
        theirs = [r[2] if isinstance(r[2], float) else 0.0 for r in rows if isinstance(r[1], float)]
        pos = range(len(names))
        ax.barh([p + 0.2 for p in pos], ours, height=0.4, label=f"parallelize ({args.impl})")
        ax.barh([p - 0.2 for p in pos], theirs, height=0.4, label="torch")
        ax.set_yticks(list(pos), names)
        ax.set_xlabel("tokens / s (slowest rank)")
        ax.legend()

    print(f"wrote {save_plot(args.out / 'bench_parallelize.png', draw)} and {args.out / 'bench_parallelize.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
