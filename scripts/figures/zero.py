"""Part 3's figures: what each rank stores at ZeRO stages 0-3 (zero_stages.png), and FSDP's gather,
compute, free per layer (fsdp_timeline.png). One module for the handout (03-zero) and both part modules
(sharded_optimizer.py: stages 1-2, fsdp.py: stage 3).

    python -m scripts.figures.zero       # writes both into handouts/figures/
"""

from __future__ import annotations

import argparse
from pathlib import Path

from matplotlib import pyplot as plt

from scripts.figures.palette import COMM, FIGURE_DIR, REDUCE, STATE, WORK, box, save


def draw_zero(path: Path) -> Path:
    """What each of N = 4 ranks stores at ZeRO stages 0-3: parameters, gradients, optimizer state
    (16-bit parameter and gradient, K = 12 bytes of fp32 state), drawn to scale (2 : 2 : 12)."""
    n, widths = 4, {"params": 2, "grads": 2, "optimizer state": 12}
    colours = STATE
    fig, axes = plt.subplots(4, 1, figsize=(10, 6.5), sharex=True)
    for stage, ax in enumerate(axes):
        sharded = {"optimizer state": stage >= 1, "grads": stage >= 2, "params": stage >= 3}
        for r in range(n):
            x = 0.0
            for name, w in widths.items():
                if sharded[name]:
                    for k in range(n):
                        box(ax, x + k * w / n, n - 1 - r, w / n, 0.8, colours[name], alpha=1.0 if k == r else 0.08)
                else:
                    box(ax, x, n - 1 - r, w, 0.8, colours[name], alpha=1.0)
                x += w
        total = sum(w / n if sharded[name] else w for name, w in widths.items())
        ax.set_yticks([n - 1 - r + 0.4 for r in range(n)], [f"rank {r}" for r in range(n)], fontsize=7)
        ax.set_xlim(0, 16)
        ax.set_ylim(0, n)
        ax.set_title(f"stage {stage}: {total:g}Ψ bytes per rank (faded: held by another rank)", fontsize=9)
    for name, w in widths.items():
        axes[0].bar(0, 0, color=colours[name], label=f"{name} ({w} B/param)")
    axes[0].legend(loc="upper right", fontsize=7, ncol=3, bbox_to_anchor=(1.0, 1.6))
    axes[-1].set_xlabel("bytes per parameter")
    fig.tight_layout()
    return save(fig, path)


def draw_fsdp(path: Path) -> Path:
    """FSDP on three layers: each layer's weight is all-gathered just before use and freed after, in
    forward and again (reversed) in backward, where its gradient is then reduce-scattered; the line
    below counts how many full layers a rank holds at each moment (at most one here, without prefetch)."""
    layers = 3
    events = []  # (row, start, width, colour, text)
    t = 0.0
    held = []
    for i in range(layers):
        events += [("comm", t, 0.6, COMM, f"AG W{i}"), ("compute", t + 0.6, 1.0, WORK["F"], f"fwd {i}")]
        held.append((t, t + 1.6))
        t += 1.6
    for i in reversed(range(layers)):
        events += [
            ("comm", t, 0.6, COMM, f"AG W{i}"),
            ("compute", t + 0.6, 2.0, WORK["B"], f"bwd {i}"),
            ("comm", t + 2.6, 0.6, REDUCE, f"RS dW{i}"),
        ]
        held.append((t, t + 2.6))
        t += 2.6
    fig, ax = plt.subplots(figsize=(11, 2.6))
    rows = {"compute": 1.1, "comm": 0.1}
    for row, start, w, colour, text in events:
        box(ax, start, rows[row], w, 0.8, colour, text, fontsize=7)
    for start, end in held:
        ax.plot([start, end], [2.2, 2.2], color="black", lw=3)
    ax.text(0, 2.4, "a full layer's weight is held (gathered, then freed)", fontsize=8)
    ax.set_yticks([0.5, 1.5], ["communication", "compute"])
    ax.set_xlim(0, t + 0.8)
    ax.set_ylim(0, 2.8)
    ax.set_xlabel("time (no prefetch: each all-gather waits for the previous layer; prefetch overlaps them)")
    ax.set_title("FSDP (ZeRO-3): gather, compute, free per layer; reduce-scatter each weight's gradient", fontsize=9)
    fig.tight_layout()
    return save(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", type=Path, default=FIGURE_DIR, help="folder (default handouts/figures/)")
    args = parser.parse_args()
    print(draw_zero(args.out_dir / "zero_stages.png"))
    print(draw_fsdp(args.out_dir / "fsdp_timeline.png"))


if __name__ == "__main__":
    main()
