"""Train the given transformer on the generated corpus with your ``parallelize`` (handouts/11-capstone.md).

    python -m scripts.tools.train --mesh dp2,tp2,pp2 --steps 200                 # 8 gloo processes on the CPU
    python -m scripts.tools.train --mesh cp2,tp2 --steps 100 --impl student      # your parts (a kit's default)
    python -m scripts.tools.train --mesh dp2,ep2 --moe-every 2 --steps 100       # MoE blocks, experts over ep

Runs the same training twice from the same seed and batches: once in this process (the dense model, the
whole batch) and once on the mesh (``parallelize(model, mesh).train_step`` on every rank), prints the
progress of both, plots the loss curves (out/train_<mesh>.png) and samples text from the trained
parallel model (its pieces gathered back into the dense layout). The curves coincide; in float32 only up
to rounding in another order, which training amplifies from a few tens of steps on into a visible drift
of the per-batch losses. A third curve shows that this is rounding's own doing: one process again, from
weights nudged by one unit in the last place, drifts from the first as far as the mesh does
(``--no-nudged`` skips it). ``--dtype float64`` keeps all within ~1e-8. Axes missing from ``--mesh`` have size 1;
the mesh is laid out dp, fsdp, pp, ep, cp, tp (an fsdp axis means HSDP: FSDP within it, replicas across dp).
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

import torch

from cs336_systems.transformer import (
    CharTokenizer,
    Transformer,
    TransformerConfig,
    generate,
    get_batch,
    lm_loss,
    make_corpus,
)
from scripts.bench.common import add_common_args, launch, load_impl, save_plot

AXES = ("dp", "fsdp", "pp", "ep", "cp", "tp")
DTYPES = {"float32": torch.float32, "float64": torch.float64}
ROW_SHARDED = ("attn.wq.weight", "attn.wk.weight", "attn.wv.weight", "ffn.w_gate.weight", "ffn.w_up.weight")
COLUMN_SHARDED = ("attn.wo.weight", "ffn.w_down.weight")


def parse_mesh(text: str) -> dict[str, int]:
    """``"dp2,tp2,pp2"`` -> ``{"dp": 2, "pp": 2, "cp": 1, "tp": 2}`` (ep, fsdp only when named), in AXES order."""
    sizes = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        axis, size = item.rstrip("0123456789"), item[len(item.rstrip("0123456789")) :]
        if axis not in AXES or not size.isdigit() or int(size) < 1:
            raise SystemExit(f"--mesh: items are <axis><size> with axis in {AXES}, e.g. dp2,tp2; got {item!r}")
        sizes[axis] = int(size)
    return {a: sizes.get(a, 1) for a in AXES if a not in ("ep", "fsdp") or a in sizes}


def _hyper(args) -> dict:
    return {"lr": args.lr, "weight_decay": args.weight_decay}


def dense_run(cfg: TransformerConfig, data: torch.Tensor, args, *, nudge: bool = False) -> list[float]:
    """The single-process baseline: the whole model, the whole batch, AdamW. ``nudge``: every initial
    weight moved by about one unit in the last place first (x(1 ± 2^-24)), to show how far rounding alone
    carries the same training."""
    model = Transformer(cfg, seed=args.seed).to(DTYPES[args.dtype])
    if nudge:
        signs = torch.Generator().manual_seed(args.seed + 1)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1 + 2.0**-24 * (torch.randint(0, 2, p.shape, generator=signs) * 2 - 1).to(p.dtype))
    label = "one process, nudged" if nudge else "one process"
    opt = torch.optim.AdamW(model.parameters(), **_hyper(args))
    losses, start = [], time.perf_counter()
    for step in range(args.steps):
        x, y = get_batch(data, args.batch, args.seq, step, seed=args.seed)
        opt.zero_grad(set_to_none=True)
        loss = lm_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step % args.log_every == 0 or step == args.steps - 1:
            print(f"  {label}  step {step:4d}/{args.steps}  loss {losses[-1]:.4f}  "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)  # fmt: skip
    return losses


def mesh_rank(rank: int, world_size: int, device, *, impl: str, shape: dict, cfg, data, args) -> dict:
    """Every rank: build the mesh, parallelize, train; the reporting rank prints progress."""
    warnings.filterwarnings("ignore", category=FutureWarning)
    M, P = load_impl(impl, "mesh"), load_impl(impl, "parallelize")
    mesh = M.ProcessMesh(shape)
    model = Transformer(cfg, seed=args.seed).to(device=device, dtype=DTYPES[args.dtype])
    data_parallel = "hsdp" if "fsdp" in shape else args.data_parallel
    pt = P.parallelize(model, mesh, num_microbatches=args.microbatches, schedule=args.schedule,
                       data_parallel=data_parallel, **_hyper(args))  # fmt: skip
    reporter = all(c == 0 for a, c in mesh.coords().items() if a != "pp") and mesh.rank("pp") == shape["pp"] - 1
    losses, start = [], time.perf_counter()
    for step in range(args.steps):
        x, y = get_batch(data, args.batch, args.seq, step, seed=args.seed)
        losses.append(pt.train_step(x.to(device), y.to(device)))
        if reporter and (step % args.log_every == 0 or step == args.steps - 1):
            print(f"  mesh {args.mesh:>10}  step {step:4d}/{args.steps}  loss {losses[-1]:.4f}  "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)  # fmt: skip
    # numpy, not tensors: torch's queue would share their storage with a process that is about to exit
    state = {name: t.detach().cpu().numpy() for name, t in pt.local_state_dict().items()}
    return {"coords": mesh.coords(), "losses": losses, "state": state}


def assemble(outs: list[dict], shape: dict[str, int]) -> dict[str, torch.Tensor]:
    """The dense state dict from every rank's ``local_state_dict`` (TP shards concatenated in tp order)."""
    pieces: dict[str, dict[int, torch.Tensor]] = {}
    for out in outs:
        for name, t in out["state"].items():
            pieces.setdefault(name, {})[out["coords"].get("tp", 0)] = torch.from_numpy(t)
    full = {}
    for name, by_tp in pieces.items():
        ordered = [by_tp[t] for t in sorted(by_tp)]
        if name.endswith(ROW_SHARDED):
            full[name] = torch.cat(ordered, 0)
        elif name.endswith(COLUMN_SHARDED):
            full[name] = torch.cat(ordered, 1)
        else:
            full[name] = ordered[0]
    return full


def report_gaps(what: str, dense: list[float], other: list[float]) -> None:
    """How far ``other``'s losses are from the one-process run's: at step 0, at most, and from when."""
    gaps = [abs(a - b) for a, b in zip(dense, other)]
    apart = next((i for i, g in enumerate(gaps) if g > 1e-3), None)
    print(
        f"|loss difference| of {what} from one process: step 0 {gaps[0]:.1e}, largest {max(gaps):.1e}"
        + (f"; above 1e-3 from step {apart} on" if apart is not None else "")
    )


def plot(path, args, dense: list[float], parallel: list[float], nudged: list[float] | None):
    def draw(ax):
        ax.plot(dense, label="one process, whole batch", lw=3, alpha=0.5)
        ax.plot(parallel, label=f"parallelize on {args.mesh} ({args.impl})", lw=1.2, ls="--")
        if nudged is not None:
            ax.plot(nudged, label="one process, initial weights nudged by one ulp", lw=0.8, ls=":", color="grey")
        ax.set(xlabel="step", ylabel="loss (nats / character)", title=f"The same training on {args.mesh}")
        ax.legend()

    return save_plot(path, draw)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap)
    ap.add_argument("--mesh", default="dp2,tp2,pp2", help="axis sizes, e.g. dp2,tp2,pp2 (default) or cp2,tp2")
    ap.add_argument("--steps", type=int, default=200, help="optimizer steps (default 200)")
    ap.add_argument("--batch", type=int, default=16, help="sequences per step, the whole batch (default 16)")
    ap.add_argument("--seq", type=int, default=64, help="tokens per sequence (default 64)")
    ap.add_argument("--microbatches", type=int, default=0, help="pipeline microbatches (default: pp)")
    ap.add_argument("--schedule", default="1f1b", choices=["1f1b", "gpipe"], help="pipeline schedule (default 1f1b)")
    ap.add_argument(
        "--data-parallel",
        default="ddp",
        choices=["ddp", "zero1", "fsdp"],
        help="over dp (default ddp); a mesh with an fsdp axis (dp2,fsdp2) runs HSDP",
    )
    ap.add_argument("--moe-every", type=int, default=0, help="an MoE FFN every k-th block (default 0: none)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--dtype",
        default="float32",
        choices=sorted(DTYPES),
        help="float64: the curves agree to ~1e-8, not just to float32's drift (slower)",
    )
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument(
        "--no-nudged",
        dest="nudged",
        action="store_false",
        help="float32: skip the third run (one process from weights nudged by one ulp) that shows rounding's own drift",
    )
    ap.add_argument("--sample", type=int, default=200, help="characters of text to sample at the end (default 200)")
    args = ap.parse_args(argv)
    shape = parse_mesh(args.mesh)
    args.microbatches = args.microbatches or shape["pp"]
    world = math.prod(shape.values())
    cfg = TransformerConfig(moe_every=args.moe_every)
    tok = CharTokenizer()
    data = tok.encode(make_corpus())
    torch.set_num_threads(max(1, torch.get_num_threads() // world))
    print(f"model: {sum(p.numel() for p in Transformer(cfg).parameters()) / 1e6:.2f} M parameters {cfg}")
    print(f"mesh {shape} on {world} {args.backend} processes, impl {args.impl}; {args.steps} steps of "
          f"{args.batch} x {args.seq} tokens")  # fmt: skip
    outs = launch(world, mesh_rank, backend=args.backend, impl=args.impl, shape=shape, cfg=cfg, data=data, args=args)
    parallel = next(o["losses"] for o in outs if o["losses"][0] is not None)
    print("one process on the whole batch:")
    dense = dense_run(cfg, data, args)
    report_gaps("the mesh", dense, parallel)
    nudged = None
    if args.dtype == "float32" and args.nudged:
        print("one process again, every initial weight nudged by one ulp (how far rounding alone goes):")
        nudged = dense_run(cfg, data, args, nudge=True)
        report_gaps("the nudged run", dense, nudged)
    suffix = "" if args.dtype == "float32" else f"_{args.dtype}"
    path = plot(args.out / f"train_{args.mesh.replace(',', '_')}{suffix}.png", args, dense, parallel, nudged)
    print(f"wrote {path}")
    model = Transformer(cfg, seed=args.seed).to(DTYPES[args.dtype])
    model.load_state_dict(assemble(outs, shape))
    prompt = tok.encode("alice ")
    print("sample from the parallel model:\n" + tok.decode(generate(model, prompt, args.sample, seed=args.seed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
