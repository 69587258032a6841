"""Your 4-D transformer against torch's own composition: tokens per second and peak memory (handouts/11-capstone.md).

    python -m scripts.bench.parallelize                                   # gloo on CPU, 2 processes (~1 min)
    python -m scripts.bench.parallelize --impl student --steps 8
    python -m scripts.bench.parallelize --d-model 256 --layers 4 --batch 16 --seq 128
    torchrun --standalone --nproc_per_node=2 -m scripts.bench.parallelize --backend nccl

On the same ``transformer.Transformer``, the same batch and the same mesh of 2 ranks, it times one AdamW
step of ``parallelize(model, mesh).train_step`` (your parts) against torch's own pieces doing the same:

    dp2     parallelize data_parallel="ddp"      vs  torch.nn.parallel.DistributedDataParallel
    fsdp2   parallelize data_parallel="fsdp"     vs  torch.distributed.fsdp.fully_shard on every block
    tp2     parallelize (TP + SP, Part 4)        vs  DTensor parallelize_module (Colwise/Rowwise, no SP)

Rounds alternate ours and theirs so both meet the same spells of the machine; the table gives tokens per
second (the whole batch's tokens / the slowest rank's step time), the ranks' peak resident memory (the
process's maximum RSS so far, after ours and torch's runs of this mesh and the meshes above it: parameters,
gradients, optimizer state, activations and the runtime; on CPU a coarse upper bound), and the
ratio theirs/ours of step times with a 90% bootstrap interval (>1: ours is faster). torch's pipelining
(``torch.distributed.pipelining``) is not compared: its schedules need a traced model split and have no
CPU/gloo path that runs this model reliably on every torch version. On CUDA the memory column is
``torch.cuda.max_memory_allocated`` and a last column gives our run's MFU (``accounting.mfu``: 6ND FLOPs
per token against ``--peak-tflops`` per GPU; not yet run on a GPU). Writes out/bench_parallelize.{csv,png}.
"""

from __future__ import annotations

import argparse
import math
import resource
import statistics
import warnings

import torch

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
    write_csv,
)

SCHEMES = ("dp2", "fsdp2", "tp2")


def _peak_mb(device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _ours(P, M, scheme: str, cfg, device, args):
    shape = {"dp": 2, "pp": 1, "cp": 1, "tp": 1} if scheme != "tp2" else {"dp": 1, "pp": 1, "cp": 1, "tp": 2}
    mesh = M.ProcessMesh(shape)
    model = Transformer(cfg, seed=0).to(device)
    pt = P.parallelize(model, mesh, data_parallel="fsdp" if scheme == "fsdp2" else "ddp", lr=1e-3)
    return lambda x, y: pt.train_step(x, y)


def _theirs(scheme: str, cfg, device, rank: int, args):
    model = Transformer(cfg, seed=0).to(device)
    if scheme == "dp2":
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model)
    elif scheme == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device.type, (2,))
        for name, child in model.named_children():
            if name.startswith("block"):
                fully_shard(child, mesh=mesh)
        fully_shard(model, mesh=mesh)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        mesh = init_device_mesh(device.type, (2,))
        plan = {}
        for name, child in model.named_children():
            if name.startswith("block"):
                plan.update({f"{name}.attn.{w}": ColwiseParallel() for w in ("wq", "wk", "wv")})
                plan[f"{name}.attn.wo"] = RowwiseParallel()
                if hasattr(child.ffn, "w_gate"):
                    plan.update({f"{name}.ffn.w_gate": ColwiseParallel(), f"{name}.ffn.w_up": ColwiseParallel(),
                                 f"{name}.ffn.w_down": RowwiseParallel()})  # fmt: skip
        parallelize_module(model, mesh, plan)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data_parallel = scheme != "tp2"

    def step(x, y):
        if data_parallel:  # each rank its half of the batch, as parallelize does
            n = x.shape[0] // 2
            x, y = x[rank * n : (rank + 1) * n], y[rank * n : (rank + 1) * n]
        opt.zero_grad(set_to_none=True)
        lm_loss(model(x), y).backward()
        opt.step()

    return step


def bench_rank(rank: int, world_size: int, device, *, impl: str, args) -> dict:
    warnings.filterwarnings("ignore")  # torch's FutureWarnings (collective names, DTensor), once per rank
    P, M = load_impl(impl, "parallelize"), load_impl(impl, "mesh")
    cfg = TransformerConfig(vocab_size=64, d_model=args.d_model, n_layers=args.layers, n_heads=args.heads,
                            n_kv_heads=args.kv_heads, d_ff=args.d_ff)  # fmt: skip
    g = torch.Generator().manual_seed(0)
    rows = torch.randint(0, cfg.vocab_size, (args.batch, args.seq + 1), generator=g)
    x, y = rows[:, :-1].to(device), rows[:, 1:].to(device)
    out = {}
    for scheme in SCHEMES:
        runs = {}
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
        for r in range(args.warmup + args.steps):
            for name, step in runs.items():  # interleaved: both meet the same spell of the machine
                t = timed(lambda step=step: step(x, y), device)
                if r >= args.warmup:
                    times[name].append(t)
        out.setdefault(scheme, {}).update({"times": times, "peak_mb": _peak_mb(device)})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--d-ff", type=int, default=384)
    ap.add_argument("--batch", type=int, default=8, help="whole batch, sequences (default 8)")
    ap.add_argument("--seq", type=int, default=128, help="tokens per sequence (default 128)")
    ap.add_argument("--steps", type=int, default=6, help="timed rounds (default 6)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument(
        "--peak-tflops",
        type=float,
        default=989.0,
        help="on GPU: the peak for the MFU column (default 989, H100 dense bf16; fp32 runs: use ~67)",
    )
    args = ap.parse_args(argv)
    results = launch(2, bench_rank, backend=args.backend, impl=args.impl, args=args)
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
        cfg = TransformerConfig(vocab_size=64, d_model=args.d_model, n_layers=args.layers, n_heads=args.heads,
                                n_kv_heads=args.kv_heads, d_ff=args.d_ff)  # fmt: skip
        num_params = sum(p.numel() for p in Transformer(cfg).parameters())
        accounting = load_impl(args.impl, "accounting")
    rows = []
    for scheme in SCHEMES:
        r0 = results[0][scheme]
        if "times" not in r0:
            rows.append([scheme, r0.get("error", "?"), "", "", "", ""])
            continue
        ours = r0["times"]["ours"]
        theirs = r0["times"].get("torch")
        peak = max(r[scheme]["peak_mb"] for r in results)
        row = [scheme, tokens / statistics.median(ours)]
        if theirs:
            low, high = ratio_interval(theirs, ours)
            row += [tokens / statistics.median(theirs), statistics.median(theirs) / statistics.median(ours),
                    f"[{low:.2f}, {high:.2f}]"]  # fmt: skip
        else:
            row += [math.nan, math.nan, r0.get("error", "")]
        row.append(peak)
        if gpu:  # two GPUs share the work: the per-GPU rate is half the tokens
            row.append(accounting.mfu(row[1] / 2, num_params, args.peak_tflops * 1e12))
        rows.append(row)
    print(format_table(headers, rows, floatfmt=".3g"))
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
