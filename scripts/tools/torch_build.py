"""Which torch this environment runs, and how many GPUs it sees: the first check on a grading node.

    python -m scripts.tools.torch_build                  # one line: version, CPU or CUDA build, GPUs, NCCL
    python -m scripts.tools.torch_build --expect-gpus 8  # exit 1, saying why, unless 8 GPUs and NCCL are usable

A CPU build of torch on a GPU node grades nothing on NCCL (every NCCL test is skipped for want of GPUs), so the
grading guide runs this right after ``scripts/setup.sh`` (which prints the same line).
"""

from __future__ import annotations

import argparse
import sys


def describe() -> tuple[str, int, bool]:
    """(the line to print, visible GPUs, NCCL available)."""
    import torch
    import torch.distributed as dist

    cuda = torch.version.cuda
    gpus = torch.cuda.device_count() if cuda else 0
    nccl = bool(cuda) and dist.is_available() and dist.is_nccl_available()
    build = f"CUDA {cuda} build" if cuda else "CPU build"
    names = sorted({torch.cuda.get_device_name(i) for i in range(gpus)}) if gpus else []
    line = f"torch {torch.__version__} ({build}); {gpus} GPU(s) visible" + (f": {', '.join(names)}" if names else "")
    line += "; NCCL available" if nccl else "; no NCCL (gloo only)"
    return line, gpus, nccl


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--expect-gpus", type=int, default=0, help="fail unless at least this many GPUs and NCCL")
    args = p.parse_args(argv)
    line, gpus, nccl = describe()
    print(line)
    if args.expect_gpus and (gpus < args.expect_gpus or not nccl):
        print(f"expected {args.expect_gpus} GPUs with NCCL: reinstall torch with a CUDA build, e.g. "
              'CS336_TORCH="--force-reinstall torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128" '
              "bash scripts/setup.sh", file=sys.stderr)  # fmt: skip
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
