"""Which (DP, TP, PP, ZeRO) fits? The planner of accounting.py, its reasoning as a table (handouts/07-mesh.md §7.4).

    python -m scripts.tools.plan --preset llama3-405b          # TP 8, PP 16, DP 128, as Meta trained it
    python -m scripts.tools.plan --preset all                   # every preset, then the published MoE layouts
    python -m scripts.tools.plan --params 70e9 --layers 80 --d-model 8192 --heads 64 --seq 4096 \\
        --batch 512 --gpus-per-node 8 --nodes 2 --gpu-memory 80 --recompute full

Rules (accounting.plan_parallelism): TP inside a node and no wider than needed, then PP across nodes,
DP the rest, the lowest ZeRO stage that fits (ZeRO-3 last). Assumptions: bf16 mixed-precision Adam
(2 + 2 + 12 bytes per parameter), microbatch 1, 1F1B, sequence parallelism with TP; embeddings,
logits, buffers and fragmentation not counted. GB are 1e9 bytes.
"""

from __future__ import annotations

import argparse
import importlib.util

from scripts.bench.common import format_table, load_impl, resolve_impl

# Published dense models (the planner's domain) and the hand-worked examples of the handout.
PRESETS = {
    "llama3-405b": dict(num_params=405e9, num_layers=126, d_model=16384, heads=128, seq=8192, global_batch=2048,
                        gpus_per_node=8, num_nodes=2048, gpu_memory_gb=80, recompute="selective",
                        published="TP 8, PP 16, DP 128 (Llama 3 paper, §3.3.2)"),
    "7b-one-node": dict(num_params=7e9, num_layers=32, d_model=4096, heads=32, seq=4096, global_batch=512,
                        gpus_per_node=8, num_nodes=1, gpu_memory_gb=80, recompute="selective", published="-"),
    "70b-two-nodes": dict(num_params=70e9, num_layers=80, d_model=8192, heads=64, seq=4096, global_batch=512,
                          gpus_per_node=8, num_nodes=2, gpu_memory_gb=80, recompute="full", published="-"),
    "13b-40gb-node": dict(num_params=13e9, num_layers=40, d_model=5120, heads=40, seq=2048, global_batch=256,
                          gpus_per_node=8, num_nodes=1, gpu_memory_gb=40, recompute="selective", published="-"),
}  # fmt: skip

# Published MoE layouts: the planner is for dense models, so these are checked, not planned.
MOE = {
    "DeepSeek-V3 671B": dict(num_params=671e9, expert_params=654e9, ep=64, num_layers=61, d_model=7168, heads=128,
                             seq=4096, microbatch=1, dp=128, tp=1, pp=16, zero_stage=1, num_microbatches=120,
                             published="EP 64, PP 16, ZeRO-1 DP, 2048 GPUs (DeepSeek-V3 report, §3.2.1)"),
    "Mixtral 8x22B": dict(num_params=141e9, expert_params=135e9, ep=8, num_layers=56, d_model=6144, heads=48,
                          seq=4096, microbatch=1, dp=32, tp=4, pp=4, zero_stage=1, num_microbatches=32,
                          published="EP 8, PP 4, TP 4 on 512 GPUs (not published by Mistral; as issue 14 lists)"),
}  # fmt: skip


def plan(accounting, name: str, spec: dict) -> None:
    spec = dict(spec)
    published = spec.pop("published")
    memory = spec.pop("gpu_memory_gb") * 1e9
    args = [spec.pop(k) for k in ("num_params", "num_layers", "d_model", "heads", "seq", "global_batch")]
    result = accounting.plan_parallelism(*args, gpu_memory_bytes=memory, **spec)
    rows = [[r["tp"], r["pp"], r["dp"], "-" if r["zero_stage"] is None else r["zero_stage"],
             "-" if r["memory_per_rank"] is None else r["memory_per_rank"] / 1e9, "yes" if r["fits"] else "no",
             r["reason"]] for r in result["rows"]]  # fmt: skip
    print(f"\n## {name}: {args[0] / 1e9:.0f}B parameters, {args[1]} layers, h = {args[2]}, {args[3]} heads, "
          f"seq {args[4]}, batch {args[5]}, {spec['num_nodes']} nodes x {spec['gpus_per_node']} GPUs of "
          f"{memory / 1e9:.0f} GB, recompute {spec.get('recompute', 'selective')}")  # fmt: skip
    print(format_table(["tp", "pp", "dp", "zero", "GB/GPU", "fits", "why"], rows, floatfmt=".1f"))
    traffic = ", ".join(f"{axis} {b / 1e9:.1f} GB" for axis, b in result["bytes_per_axis"].items())
    print(f"-> TP {result['tp']}, PP {result['pp']}, DP {result['dp']}, ZeRO-{result['zero_stage']}, "
          f"{result['num_microbatches']} microbatches, {result['memory_per_rank'] / 1e9:.1f} GB per GPU; "
          f"sent per GPU per step: {traffic}. Published: {published}")  # fmt: skip


def check_moe(accounting) -> None:
    rows = []
    for name, spec in MOE.items():
        spec = dict(spec)
        published = spec.pop("published")
        args = [spec.pop(k) for k in ("num_params", "num_layers", "d_model", "heads", "seq", "microbatch")]
        gb = accounting.parallel_memory_per_rank(*args, **spec) / 1e9
        rows.append([name, published, spec["dp"], spec["tp"], spec["pp"], spec["ep"], spec["zero_stage"], gb])
    print("\n## Published MoE layouts, memory per GPU by parallel_memory_per_rank (experts split ep * pp ways)")
    print(format_table(["model", "published", "dp", "tp", "pp", "ep", "zero", "GB/GPU"], rows, floatfmt=".1f"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=[*PRESETS, "all"], help="a published model or handout example")
    for flag, kind, text in [("--params", float, "parameters, e.g. 70e9"), ("--layers", int, "transformer layers"),
                             ("--d-model", int, "d_model size h"), ("--heads", int, "attention heads"),
                             ("--seq", int, "sequence length"), ("--batch", int, "global batch, in sequences"),
                             ("--gpus-per-node", int, "GPUs per node"), ("--nodes", int, "nodes"),
                             ("--gpu-memory", float, "GB per GPU (1e9 bytes)")]:  # fmt: skip
        parser.add_argument(flag, type=kind, help=text)
    parser.add_argument("--recompute", default="selective", choices=["none", "selective", "full"])
    # The staff checkout uses the reference by default; a student release has only the student package.
    default = "reference" if importlib.util.find_spec(resolve_impl("reference")) else "student"
    parser.add_argument(
        "--impl", default=default, help=f"student, reference, or a package with accounting.py (default {default})"
    )
    args = parser.parse_args()
    accounting = load_impl(args.impl, "accounting")
    if args.preset:
        for name in PRESETS if args.preset == "all" else [args.preset]:
            plan(accounting, name, PRESETS[name])
        if args.preset == "all":
            check_moe(accounting)
        return
    missing = [f for f in ("params", "layers", "d_model", "heads", "seq", "batch", "gpus_per_node", "nodes",
                           "gpu_memory") if getattr(args, f) is None]  # fmt: skip
    if missing:
        parser.error(f"give --preset or all of: {', '.join('--' + m.replace('_', '-') for m in missing)}")
    spec = dict(num_params=args.params, num_layers=args.layers, d_model=args.d_model, heads=args.heads, seq=args.seq,
                global_batch=args.batch, gpus_per_node=args.gpus_per_node, num_nodes=args.nodes,
                gpu_memory_gb=args.gpu_memory, recompute=args.recompute, published="-")  # fmt: skip
    plan(accounting, "your cluster", spec)


if __name__ == "__main__":
    main()
