"""Which (DP, TP, PP, ZeRO) fits? The planners of accounting.py, their reasoning as a table (handouts/07-mesh.md
§7.4; with CP and EP, handouts/11-capstone.md §11.4).

    python -m scripts.tools.plan --preset llama3-405b          # TP 8, PP 16, DP 128, as Meta trained it
    python -m scripts.tools.plan --preset llama3-405b-128k     # + CP 16 for 128k tokens (plan_capstone)
    python -m scripts.tools.plan --preset deepseek-v3-like     # an MoE: EP inside the data axes
    python -m scripts.tools.plan --preset all                   # every preset, then the published MoE layouts
    python -m scripts.tools.plan --params 70e9 --layers 80 --d-model 8192 --heads 64 --seq 4096 \\
        --batch 512 --gpus-per-node 8 --nodes 2 --gpu-memory 80 --recompute full
    python -m scripts.tools.plan --params 405e9 --layers 126 --d-model 16384 --heads 128 --kv-heads 8 \\
        --seq 131072 --batch 128 --gpus-per-node 8 --nodes 2048 --gpu-memory 80 --capstone

Rules (accounting.plan_parallelism): TP inside a node and no wider than needed, then PP across nodes,
DP the rest, the lowest ZeRO stage that fits (ZeRO-3 last). With ``--capstone`` (implied by the
capstone presets, ``--kv-heads`` and ``--experts``), accounting.plan_capstone: the same, a pipeline
only as deep as its microbatches, CP only when nothing fits without it, and for an MoE the smallest
EP that fits. Assumptions: bf16 mixed-precision Adam (2 + 2 + 12 bytes per parameter), microbatch
1, 1F1B, sequence parallelism with TP; embeddings, logits, buffers and fragmentation not counted.
GB are 1e9 bytes.
"""

from __future__ import annotations

import argparse
import importlib.util
from collections import Counter

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

# The capstone's planner (plan_capstone: CP and EP too). Llama 3 405B at 128k: Grattafiori et al. 2024, Table 4.
# DeepSeek-V3-like: 61 layers, 58 of them MoE with 256 routed experts of SwiGLU d_ff 2048 (3 matrices) counted as
# models.MLP experts of d_ff 3072 (2 matrices: the same 654e9 expert parameters), top-8, 15360 sequences of 4096.
CAPSTONE = {
    "llama3-405b-128k": dict(num_params=405e9, num_layers=126, d_model=16384, heads=128, kv_heads=8, seq=131072,
                             global_batch=128, gpus_per_node=8, num_nodes=2048, gpu_memory_gb=80,
                             recompute="selective", published="TP 8, CP 16, PP 16, DP 8 (Llama 3 paper, Table 4)"),
    "deepseek-v3-like": dict(num_params=671e9, num_layers=61, d_model=7168, heads=128, seq=4096, global_batch=15360,
                             gpus_per_node=8, num_nodes=256, gpu_memory_gb=80, recompute="selective",
                             num_experts=256, expert_d_ff=3072, moe_layers=58, top_k=8,
                             published="EP 64, PP 16, TP 1, ZeRO-1 DP 128 (DeepSeek-V3 report, §3.2.1)"),
}  # fmt: skip

# Published MoE layouts: the §7.4 planner is for dense models, so these are checked, not planned.
MOE = {
    "DeepSeek-V3 671B": dict(num_params=671e9, expert_params=654e9, ep=64, num_layers=61, d_model=7168, heads=128,
                             seq=4096, microbatch=1, dp=128, tp=1, pp=16, zero_stage=1, num_microbatches=120,
                             published="EP 64, PP 16, ZeRO-1 DP, 2048 GPUs (DeepSeek-V3 report, §3.2.1)"),
    "Mixtral 8x22B": dict(num_params=141e9, expert_params=135e9, ep=8, num_layers=56, d_model=6144, heads=48,
                          seq=4096, microbatch=1, dp=32, tp=4, pp=4, zero_stage=1, num_microbatches=32,
                          published="EP 8, PP 4, TP 4 on 512 GPUs (not published by Mistral; as issue 14 lists)"),
}  # fmt: skip


def plan(accounting, name: str, spec: dict, capstone: bool = False, all_rows: bool = False) -> None:
    """Print the planner's table for ``spec`` (plan_capstone's with ``capstone``) and its choice."""
    spec = dict(spec)
    published = spec.pop("published")
    memory = spec.pop("gpu_memory_gb") * 1e9
    args = [spec.pop(k) for k in ("num_params", "num_layers", "d_model", "heads", "seq", "global_batch")]
    planner = accounting.plan_capstone if capstone else accounting.plan_parallelism
    result = planner(*args, gpu_memory_bytes=memory, **spec)
    axes = ["tp", "cp", "pp", "dp", "ep"] if capstone else ["tp", "pp", "dp"]
    shown = [r for r in result["rows"] if all_rows or r["memory_per_rank"] is not None]
    rows = [[*(r[a] for a in axes), "-" if r["zero_stage"] is None else r["zero_stage"],
             "-" if r["memory_per_rank"] is None else r["memory_per_rank"] / 1e9, "yes" if r["fits"] else "no",
             r["reason"]] for r in shown]  # fmt: skip
    moe = f", MoE: {spec['num_experts']} experts in {spec['moe_layers']} layers" if spec.get("num_experts") else ""
    print(f"\n## {name}: {args[0] / 1e9:.0f}B parameters, {args[1]} layers, h = {args[2]}, {args[3]} heads{moe}, "
          f"seq {args[4]}, batch {args[5]}, {spec['num_nodes']} nodes x {spec['gpus_per_node']} GPUs of "
          f"{memory / 1e9:.0f} GB, recompute {spec.get('recompute', 'selective')}")  # fmt: skip
    print(format_table([*axes, "zero", "GB/GPU", "fits", "why"], rows, floatfmt=".1f"))
    if not all_rows:
        print(excluded_summary(result["rows"]))
    traffic = ", ".join(f"{axis} {b / 1e9:.1f} GB" for axis, b in result["bytes_per_axis"].items())
    layout = ", ".join(f"{a.upper()} {result[a]}" for a in axes)
    print(f"-> {layout}, ZeRO-{result['zero_stage']}, {result['num_microbatches']} microbatches, "
          f"{result['memory_per_rank'] / 1e9:.1f} GB per GPU; sent per GPU per step: {traffic}. "
          f"Published: {published}")  # fmt: skip


def excluded_summary(rows: list[dict]) -> str:
    """One line per cp: how many layouts the rules excluded before computing their memory, and why (each row's
    ``rejected``, as plan_capstone's docstring states it; plan_parallelism's rows have none: its only rule that
    rejects early is the batch's). A layout is tried once per ZeRO pass; counted once here."""
    why = {"fills": "fewer microbatches than stages", "split": "seq / cp does not split over tp",
           "batch": "dp * microbatch does not divide the batch"}  # fmt: skip
    seen, counts = set(), {}
    for r in rows:
        key = (r.get("cp", 1), r["tp"], r["pp"])
        if r["memory_per_rank"] is None and key not in seen:
            seen.add(key)
            counts.setdefault(key[0], Counter())[r.get("rejected") or "batch"] += 1
    lines = [f"  cp {cp}: " + ", ".join(f"{n} x {why[k]}" for k, n in c.items()) for cp, c in counts.items()]
    return "\n".join(["Layouts excluded before memory (--all-rows lists them):", *lines]) if lines else ""


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
    parser.add_argument("--preset", choices=[*PRESETS, *CAPSTONE, "all"], help="a published model or handout example")
    for flag, kind, text in [("--params", float, "parameters, e.g. 70e9"), ("--layers", int, "transformer layers"),
                             ("--d-model", int, "d_model size h"), ("--heads", int, "attention heads"),
                             ("--seq", int, "sequence length"), ("--batch", int, "global batch, in sequences"),
                             ("--gpus-per-node", int, "GPUs per node"), ("--nodes", int, "nodes"),
                             ("--gpu-memory", float, "GB per GPU (1e9 bytes)")]:  # fmt: skip
        parser.add_argument(flag, type=kind, help=text)
    parser.add_argument("--recompute", default="selective", choices=["none", "selective", "full"])
    parser.add_argument(
        "--capstone",
        action="store_true",
        help="plan the capstone's mesh with plan_capstone: CP for long sequences, EP for an MoE",
    )
    for flag, text in [
        ("--kv-heads", "key/value heads (grouped-query attention; implies --capstone)"),
        ("--experts", "experts of each MoE layer (implies --capstone)"),
        ("--expert-d-ff", "an expert's hidden size (a models.MLP: 2 matrices with biases)"),
        ("--moe-layers", "how many layers are MoE"),
        ("--top-k", "experts per token"),
    ]:
        parser.add_argument(flag, type=int, help=text)
    parser.add_argument("--all-rows", action="store_true", help="also list the layouts excluded before memory")
    # The staff checkout uses the reference by default; a student release has only the student package.
    default = "reference" if importlib.util.find_spec(resolve_impl("reference")) else "student"
    parser.add_argument(
        "--impl", default=default, help=f"student, reference, or a package with accounting.py (default {default})"
    )
    args = parser.parse_args()
    accounting = load_impl(args.impl, "accounting")
    if args.preset:
        for name in [*PRESETS, *CAPSTONE] if args.preset == "all" else [args.preset]:
            capstone = args.capstone or name in CAPSTONE
            plan(accounting, name, {**PRESETS, **CAPSTONE}[name], capstone, args.all_rows)
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
    extra = dict(kv_heads=args.kv_heads, num_experts=args.experts, expert_d_ff=args.expert_d_ff,
               moe_layers=args.moe_layers, top_k=args.top_k)  # fmt: skip
    extra = {k: v for k, v in extra.items() if v is not None}
    experts = {"num_experts", "expert_d_ff", "moe_layers"}
    if set(extra) & {*experts, "top_k"} and not experts <= set(extra):
        parser.error("an MoE needs all of --experts, --expert-d-ff and --moe-layers (and optionally --top-k)")
    plan(accounting, "your cluster", {**spec, **extra}, args.capstone or bool(extra), args.all_rows)


if __name__ == "__main__":
    main()
