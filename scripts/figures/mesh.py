"""Part 7's figures (handouts/07-mesh.md), into handouts/figures/ (numbers from accounting.py).

    python -m scripts.figures.mesh                  # the reference's accounting (staff checkout)
    python -m scripts.figures.mesh --impl student   # your accounting.py

mesh_groups.png          the 8-rank mesh {"dp": 2, "pp": 2, "tp": 2} and its tp, pp, dp groups on 2 nodes
mesh_3d.png              what MeshTrainer sends: TP all-reduces, pipeline p2p, the dp all-reduce
hsdp_vs_fsdp.png         memory and cross-node bytes per GPU: DDP, FSDP over everything, HSDP
placement_bandwidth.png  Llama 3 405B's bytes per GPU per axis, and their time over NVLink vs InfiniBand
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch

from scripts.bench.common import default_impl, load_impl
from scripts.figures.palette import AXES, FIGURE_DIR, NOTE, RANKS, save

SHAPE = {"dp": 2, "pp": 2, "tp": 2}
NVLINK, INFINIBAND = 450e9, 50e9  # bytes/s per GPU and direction: H100 NVLink 4, one 400 Gb/s NIC per GPU


def _coords(rank: int) -> dict[str, int]:
    return {"dp": rank // 4, "pp": rank // 2 % 2, "tp": rank % 2}


def _position(rank: int) -> tuple[float, float]:
    """Node (= dp coordinate here) left/right, pp rows, tp columns."""
    c = _coords(rank)
    return 4.6 * c["dp"] + 1.6 * c["tp"] + 0.7, 2.6 - 1.6 * c["pp"]


def _nodes(ax) -> None:
    for node in range(2):
        ax.add_patch(FancyBboxPatch((4.6 * node + 0.1, 0.4), 3.4, 3.1, boxstyle="round,pad=0.05", fc="0.95", ec="0.5"))
        ax.text(4.6 * node + 1.8, 3.7, f"node {node}", ha="center", fontsize=9, color=NOTE)


def draw_mesh_groups(path: Path) -> Path:
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, axis in zip(axes, ["tp", "pp", "dp"]):
        _nodes(ax)
        slices: dict[tuple, list[int]] = {}
        for r in range(8):
            key = tuple(v for k, v in _coords(r).items() if k != axis)
            slices.setdefault(key, []).append(r)
        for color, ranks in zip(RANKS, slices.values()):  # one colour per group
            bend = f"arc3,rad={-0.3 if axis == 'dp' else 0}"  # dp links arc over the ranks in between
            for a, b in zip(ranks, ranks[1:]):
                style = dict(arrowstyle="-", color=color, lw=3, alpha=0.6, connectionstyle=bend)
                ax.annotate("", xy=_position(b), xytext=_position(a), arrowprops=style)
            for r in ranks:
                x, y = _position(r)
                ax.scatter([x], [y], s=600, color=color, zorder=3)
                c = _coords(r)
                ax.text(x, y, str(r), ha="center", va="center", color="white", fontweight="bold", zorder=4)
                ax.text(x, y - 0.55, f"({c['dp']},{c['pp']},{c['tp']})", ha="center", fontsize=7, color=NOTE)
        ax.set_title(f"{axis} groups: {sorted(slices.values())}", fontsize=10)
        ax.set_xlim(0, 8.2)
        ax.set_ylim(0, 4.1)
        ax.axis("off")
    fig.suptitle('ProcessMesh({"dp": 2, "pp": 2, "tp": 2}): rank = 4 dp + 2 pp + tp, (dp, pp, tp) under each rank')
    fig.tight_layout()
    return save(fig, path)


def draw_3d(path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(10, 4.2))
    _nodes(ax)
    for r in range(8):
        x, y = _position(r)
        ax.add_patch(FancyBboxPatch((x - 0.55, y - 0.35), 1.1, 0.7, boxstyle="round,pad=0.02", fc="white", ec="k"))
        c = _coords(r)
        ax.text(x, y + 0.08, f"rank {r}", ha="center", fontsize=8)
        ax.text(x, y - 0.18, f"stage {c['pp']}, tp {c['tp']}", ha="center", fontsize=7, color=NOTE)
    for r in range(8):
        c, (x, y) = _coords(r), _position(r)
        if c["tp"] == 0:  # tp all-reduce inside the stage
            ax.annotate("", xy=(x + 1.05, y), xytext=(x + 0.55, y), arrowprops=dict(arrowstyle="<->", color=AXES["tp"]))
        if c["pp"] == 0:  # pipeline p2p to the same tp coordinate of the next stage
            ax.annotate("", xy=(x, y - 1.25), xytext=(x, y - 0.35), arrowprops=dict(arrowstyle="<->", color=AXES["pp"]))
        if c["dp"] == 0:  # dp all-reduce across replicas (nodes)
            ax.annotate("", xy=(x + 4.6, y + 0.36), xytext=(x, y + 0.36), arrowprops=dict(
                arrowstyle="<->", color=AXES["dp"], connectionstyle="arc3,rad=-0.12", alpha=0.6))  # fmt: skip
    ax.text(8.3, 2.8, "tp: 2 all-reduces per MLP block\nper microbatch", color=AXES["tp"], fontsize=8)
    ax.text(8.3, 1.9, "pp: m activations forward,\nm gradients back", color=AXES["pp"], fontsize=8)
    ax.text(8.3, 1.0, "dp: 1 gradient all-reduce\nper step, after backward", color=AXES["dp"], fontsize=8)
    ax.set_xlim(0, 10.6)
    ax.set_ylim(0.2, 4.1)
    ax.axis("off")
    ax.set_title("MeshTrainer on DP 2 x PP 2 x TP 2: who talks to whom in one step")
    fig.tight_layout()
    return save(fig, path)


def draw_hsdp(path: Path, accounting=None) -> Path:
    """``accounting``: the module whose formulas give the numbers (default: the reference's, where there is one)."""
    accounting = accounting or load_impl(default_impl(), "accounting")
    params, per_node, nodes = 7e9, 8, 64
    n = per_node * nodes
    grad_bytes = 2 * params
    ring = accounting.ring_all_reduce_bytes_per_rank
    schemes = {  # name -> (model-state bytes per GPU, bytes per GPU crossing nodes per step)
        "DDP (512)": (accounting.zero_memory_per_rank(params, n, 0), ring(grad_bytes, n)),
        "FSDP over 512": (accounting.zero_memory_per_rank(params, n, 3), 1.5 * ring(grad_bytes, n)),
        "HSDP 8 x 64": (accounting.zero_memory_per_rank(params, per_node, 3), ring(grad_bytes / per_node, nodes)),
    }
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    names = list(schemes)
    ax1.bar(names, [schemes[k][0] / 1e9 for k in names], color=RANKS[:3])
    ax1.set_ylabel("GB of model states per GPU")
    ax2.bar(names, [schemes[k][1] / 1e9 for k in names], color=RANKS[:3])
    ax2.set_ylabel("GB per GPU per step across nodes")
    for ax in (ax1, ax2):
        for bar in ax.patches:
            ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), f"{bar.get_height():.1f}", ha="center",
                    va="bottom", fontsize=8)  # fmt: skip
    fig.suptitle("7B on 64 nodes of 8 GPUs: HSDP sends 1/12 of FSDP's cross-node bytes, sharding 8 ways instead of 512")
    fig.tight_layout()
    return save(fig, path)


def draw_placement(path: Path, accounting=None) -> Path:
    """``accounting`` as for ``draw_hsdp``."""
    accounting = accounting or load_impl(default_impl(), "accounting")
    traffic = accounting.communication_bytes_per_rank(405e9, 126, 16384, 8192, 1, dp=128, tp=8, pp=16, zero_stage=2,
                                                     num_microbatches=16)  # fmt: skip
    axes_ = ["tp", "pp", "dp"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    ax1.bar(axes_, [traffic[a] / 1e9 for a in axes_], color=RANKS[:3])
    ax1.set_ylabel("GB sent per GPU per step")
    ax1.set_title("Llama 3 405B: TP 8, PP 16, DP 128", fontsize=10)
    width = 0.38
    xs = range(len(axes_))
    ax2.bar([x - width / 2 for x in xs], [traffic[a] / NVLINK for a in axes_], width, label="NVLink 450 GB/s")
    ax2.bar([x + width / 2 for x in xs], [traffic[a] / INFINIBAND for a in axes_], width, label="InfiniBand 50 GB/s")
    ax2.set_xticks(list(xs), axes_)
    ax2.set_ylabel("seconds per step")
    ax2.set_title("if that axis ran inside a node vs across nodes", fontsize=10)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    return save(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default = default_impl()
    parser.add_argument(
        "--impl", default=default, help=f"student, reference, or a package with accounting.py (default {default})"
    )
    parser.add_argument("--out", type=Path, default=FIGURE_DIR, help=f"folder for the PNGs (default {FIGURE_DIR})")
    args = parser.parse_args()
    accounting = load_impl(args.impl, "accounting")
    args.out.mkdir(parents=True, exist_ok=True)
    for path in (
        draw_mesh_groups(args.out / "mesh_groups.png"),
        draw_3d(args.out / "mesh_3d.png"),
        draw_hsdp(args.out / "hsdp_vs_fsdp.png", accounting),
        draw_placement(args.out / "placement_bandwidth.png", accounting),
    ):
        print(path)


if __name__ == "__main__":
    main()
