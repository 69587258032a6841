"""Which ZeRO stage fits? Per-GPU memory of model states for each stage, from accounting.py.

    python -m scripts.tools.memory --params 7.5e9 --gpus 64 --gpu-memory 32     # the ZeRO paper's example
    python -m scripts.tools.memory --params 70e9 --gpus 8 --gpu-memory 80 --optimizer-bytes 12

Model states only (parameters, gradients, optimizer state; mixed-precision Adam by default: 2 + 2 + 12
bytes per parameter). Activations, buffers and fragmentation come on top: --reserve keeps that share of
each GPU free for them.
"""

from __future__ import annotations

import argparse
import importlib.util

from scripts.bench.common import format_table, load_impl, resolve_impl

STAGES = {
    0: "DDP (nothing sharded)",
    1: "P_os: optimizer state",
    2: "P_os+g: + gradients",
    3: "P_os+g+p: + parameters",
}


def plan(accounting, params: float, gpus: int, gpu_memory_gb: float, reserve: float, **bytes_per_param) -> list:
    """One row per stage: stage, what is sharded, GB per GPU, fits?"""
    budget = gpu_memory_gb * (1 - reserve)
    rows = []
    for stage, what in STAGES.items():
        gb = accounting.zero_memory_per_rank(params, gpus, stage, **bytes_per_param) / 1e9
        rows.append([stage, what, gb, "yes" if gb <= budget else "no"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params", type=float, required=True, help="parameter count, e.g. 7.5e9")
    parser.add_argument("--gpus", type=int, required=True, help="data-parallel GPUs")
    parser.add_argument("--gpu-memory", type=float, required=True, help="GB per GPU (1e9 bytes), e.g. 80")
    parser.add_argument("--param-bytes", type=float, default=2, help="bytes per parameter (2: fp16/bf16)")
    parser.add_argument("--grad-bytes", type=float, default=2, help="bytes per gradient (2: fp16/bf16)")
    parser.add_argument("--optimizer-bytes", type=float, default=12,
                        help="optimizer bytes per parameter (12: fp32 master, Adam m and v)")  # fmt: skip
    parser.add_argument("--reserve", type=float, default=0.0, help="share of each GPU kept for activations (0-1)")
    # The staff checkout uses the reference by default; a student release has only the student package.
    default = "reference" if importlib.util.find_spec(resolve_impl("reference")) else "student"
    parser.add_argument(
        "--impl", default=default, help=f"student, reference, or a package with accounting.py (default {default})"
    )
    args = parser.parse_args()
    if not 0 <= args.reserve < 1:
        parser.error(f"--reserve must be in [0, 1), got {args.reserve}")
    accounting = load_impl(args.impl, "accounting")
    kw = dict(param_bytes=args.param_bytes, grad_bytes=args.grad_bytes, optimizer_bytes=args.optimizer_bytes)
    try:
        rows = plan(accounting, args.params, args.gpus, args.gpu_memory, args.reserve, **kw)
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    budget = args.gpu_memory * (1 - args.reserve)
    print(f"{args.params:.3g} parameters on {args.gpus} GPUs of {args.gpu_memory:g} GB "
          f"({budget:.3g} GB for model states), {sum(kw.values()):g} bytes per parameter")  # fmt: skip
    print(format_table(["stage", "sharded", "GB per GPU", "fits"], rows, floatfmt=".3g"))
    fitting = [r[0] for r in rows if r[3] == "yes"]
    print(f"lowest stage that fits: {fitting[0]}" if fitting else "no stage fits: add GPUs or shrink the model")


if __name__ == "__main__":
    main()
