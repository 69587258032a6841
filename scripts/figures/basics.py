"""Draw every handout figure of parts 1-6 into handouts/figures/ (one command regenerates them all).

    python scripts/draw_figures.py              # all figures, then the other parts' figure scripts
    python scripts/draw_figures.py --only ring  # one figure (ring, tp, pipeline, zero, fsdp)

The figures are drawn from the handouts' definitions, not from a run: they show what the
algorithms do, so they need neither the reference nor the student package. The figures of the
other parts (and Part 5's full schedule grids, Part 1's recursive doubling) come from their own
scripts, which this one runs after its own with --skip-others unset.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib import pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, Rectangle  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ROOT / "handouts" / "figures"
RANK_COLOURS = ["tab:blue", "tab:orange", "tab:green", "tab:red"]
OTHER_SCRIPTS = ["draw_recursive_doubling.py", "draw_pipeline_schedules.py", "draw_mesh_figures.py"]


def _box(ax, x, y, w, h, colour, text="", alpha=1.0, fontsize=8, hatch=None):
    ax.add_patch(Rectangle((x, y), w, h, facecolor=colour, edgecolor="black", alpha=alpha, hatch=hatch, lw=0.8))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize)


def _arrow(ax, start, end, colour="black"):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=10, color=colour, lw=1.0))


def draw_ring(path: Path) -> None:
    """Ring reduce-scatter then all-gather on N = 3: who holds which partial sum of which chunk, step by step.

    Rank r sends chunk (r - s) mod N at reduce-scatter step s, and chunk (r + 1 - s) mod N at
    all-gather step s; after N - 1 steps of each, every rank holds every chunk's full sum."""
    n = 3
    # contributions[r][c]: the set of ranks whose chunk c has been summed into rank r's copy
    held = [[{r} for _ in range(n)] for r in range(n)]
    states, labels = [], []

    def snapshot(label):
        states.append([[set(s) for s in row] for row in held])
        labels.append(label)

    snapshot("start")
    sends = []
    for step in range(n - 1):
        moves = [(r, (r - step) % n) for r in range(n)]
        new = [[set(s) for s in row] for row in held]
        for r, c in moves:
            new[(r + 1) % n][c] |= held[r][c]
        held = new
        sends.append(moves)
        snapshot(f"reduce-scatter step {step + 1}")
    for step in range(n - 1):
        moves = [(r, (r + 1 - step) % n) for r in range(n)]
        new = [[set(s) for s in row] for row in held]
        for r, c in moves:
            new[(r + 1) % n][c] = set(held[r][c])
        held = new
        sends.append(moves)
        snapshot(f"all-gather step {step + 1}")

    fig, axes = plt.subplots(1, len(states), figsize=(3.0 * len(states), 3.2))
    for k, (ax, state, label) in enumerate(zip(axes, states, labels)):
        ax.set_xlim(-0.2, n + 0.2)
        ax.set_ylim(-0.6, n + 0.2)
        ax.axis("off")
        ax.set_title(label, fontsize=9)
        for r in range(n):
            y = n - 1 - r
            ax.text(-0.15, y + 0.4, f"r{r}", ha="right", va="center", fontsize=8)
            for c in range(n):
                full = len(state[r][c]) == n
                text = "+".join(str(i) for i in sorted(state[r][c]))
                _box(ax, c, y, 0.9, 0.8, "gold" if full else RANK_COLOURS[c], text, alpha=1.0 if full else 0.35)
        if k > 0:
            moved = ", ".join(f"r{r}→r{(r + 1) % n}: c{c}" for r, c in sends[k - 1])
            ax.text(n / 2, -0.35, moved, ha="center", fontsize=7)
    axes[0].text(n / 2, -0.35, "columns: chunks c0 c1 c2", ha="center", fontsize=7)
    fig.suptitle(
        "Ring all-reduce, N = 3: reduce-scatter (N-1 steps) then all-gather (N-1 steps); "
        "gold = the full sum of that chunk",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_tp(path: Path) -> None:
    """Megatron's MLP: f (identity forward, all-reduce backward) before the column-parallel fc1, g
    (all-reduce forward, identity backward) after the row-parallel fc2; with sequence parallelism f
    becomes an all-gather on dim 0 and g a reduce-scatter on dim 0."""
    fig, axes = plt.subplots(2, 1, figsize=(10, 5.2))
    rows = [
        (
            "tensor parallel",
            "x (s, h)\nreplicated",
            "f\nfwd: identity\nbwd: all-reduce",
            "g\nfwd: all-reduce\nbwd: identity",
            "y (s, h)\nreplicated",
        ),
        (
            "tensor + sequence parallel",
            "x (s/T, h)\nthis rank's rows",
            "all-gather dim 0\n(bwd: reduce-scatter)",
            "reduce-scatter dim 0\n(bwd: all-gather)",
            "y (s/T, h)\nthis rank's rows",
        ),
    ]
    for ax, (title, x_in, f, g, y_out) in zip(axes, rows):
        ax.set_xlim(0, 10)
        ax.set_ylim(0, 2.4)
        ax.axis("off")
        ax.set_title(title, fontsize=10)
        _box(ax, 0.1, 0.8, 1.4, 0.8, "lightgrey", x_in)
        _box(ax, 1.9, 0.8, 1.5, 0.8, "plum", f, fontsize=7)
        for t in range(2):
            y = 1.4 - 1.0 * t
            _box(ax, 3.9, y, 1.6, 0.7, RANK_COLOURS[t], f"rank {t}: fc1 cols\nGELU (d_ff/T)", alpha=0.45, fontsize=7)
            _box(ax, 5.8, y, 1.4, 0.7, RANK_COLOURS[t], f"rank {t}: fc2 rows\npartial sum", alpha=0.45, fontsize=7)
            _arrow(ax, (3.4, 1.2), (3.9, y + 0.35))
            _arrow(ax, (5.5, y + 0.35), (5.8, y + 0.35))
            _arrow(ax, (7.2, y + 0.35), (7.5, 1.2))
        _box(ax, 7.5, 0.8, 1.3, 0.8, "plum", g, fontsize=7)
        _box(ax, 8.9, 0.8, 1.05, 0.8, "lightgrey", y_out, fontsize=7)
        _arrow(ax, (1.5, 1.2), (1.9, 1.2))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _gpipe(p: int, m: int):
    """(stage, kind, microbatch, start) in unit time (F = 1, B = 2): all forwards, then all backwards."""
    out = []
    for s in range(p):
        out += [(s, "F", i, s + i) for i in range(m)]
        t0 = (m + p - 1) + 2 * (p - 1 - s)
        out += [(s, "B", i, t0 + 2 * k) for k, i in enumerate(reversed(range(m)))]
    return out


def _one_f_one_b(p: int, m: int):
    """1F1B by simulation: stage s warms up with p - 1 - s forwards, then alternates B and F."""
    order = []
    for s in range(p):
        warm = min(p - 1 - s, m)
        acts = [("F", i) for i in range(warm)]
        f, b = warm, 0
        while b < m:
            if f < m:
                acts.append(("F", f))
                f += 1
            acts.append(("B", b))
            b += 1
        order.append(acts)
    done, free, out, pos = {}, [0] * p, [], [0] * p
    progress = True
    while progress:
        progress = False
        for s in range(p):
            while pos[s] < len(order[s]):
                kind, i = order[s][pos[s]]
                dep = (s - 1, "F", i) if kind == "F" else ((s + 1, "B", i) if s < p - 1 else (s, "F", i))
                if kind == "F" and s == 0:
                    dep = None
                if dep is not None and dep not in done:
                    break
                start = max(free[s], done[dep] if dep else 0)
                end = start + (1 if kind == "F" else 2)
                done[(s, kind, i)], free[s] = end, end
                out.append((s, kind, i, start))
                pos[s] += 1
                progress = True
    return out


def draw_pipeline(path: Path) -> None:
    """GPipe and 1F1B grids for p = 4, m = 8, idle time shaded: the same bubble, (p-1)/(m+p-1),
    but 1F1B holds at most p micro-batches' activations instead of m."""
    p, m = 4, 8
    fig, axes = plt.subplots(2, 1, figsize=(11, 4.4), sharex=True)
    for ax, (name, sched) in zip(axes, [("GPipe", _gpipe(p, m)), ("1F1B", _one_f_one_b(p, m))]):
        end = max(start + (1 if kind == "F" else 2) for _, kind, _, start in sched)
        for s in range(p):
            ax.add_patch(Rectangle((0, p - 1 - s), end, 0.9, facecolor="lightgrey", hatch="//", edgecolor="grey", lw=0))
        for s, kind, i, start in sched:
            w = 1 if kind == "F" else 2
            _box(ax, start, p - 1 - s, w, 0.9, "tab:blue" if kind == "F" else "tab:orange", f"{kind}{i}", fontsize=7)
        busy = sum(1 if kind == "F" else 2 for _, kind, _, _ in sched)
        ax.set_xlim(0, end)
        ax.set_ylim(0, p)
        ax.set_yticks([p - 1 - s + 0.45 for s in range(p)], [f"stage {s}" for s in range(p)])
        ax.set_title(
            f"{name}: bubble (hatched) = {1 - busy / (p * end):.2f} of stage time "
            f"((p-1)/(m+p-1) = {(p - 1) / (m + p - 1):.2f})",
            fontsize=9,
        )
    axes[-1].set_xlabel("time (F = 1, B = 2)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_zero(path: Path) -> None:
    """What each of N = 4 ranks stores at ZeRO stages 0-3: parameters, gradients, optimizer state
    (16-bit parameter and gradient, K = 12 bytes of fp32 state), drawn to scale (2 : 2 : 12)."""
    n, widths = 4, {"params": 2, "grads": 2, "optimizer state": 12}
    colours = {"params": "tab:blue", "grads": "tab:orange", "optimizer state": "tab:green"}
    fig, axes = plt.subplots(4, 1, figsize=(10, 6.5), sharex=True)
    for stage, ax in enumerate(axes):
        sharded = {"optimizer state": stage >= 1, "grads": stage >= 2, "params": stage >= 3}
        for r in range(n):
            x = 0.0
            for name, w in widths.items():
                if sharded[name]:
                    for k in range(n):
                        _box(ax, x + k * w / n, n - 1 - r, w / n, 0.8, colours[name], alpha=1.0 if k == r else 0.08)
                else:
                    _box(ax, x, n - 1 - r, w, 0.8, colours[name], alpha=1.0)
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
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_fsdp(path: Path) -> None:
    """FSDP on three layers: each layer's weight is all-gathered just before use and freed after, in
    forward and again (reversed) in backward, where its gradient is then reduce-scattered; the line
    below counts how many full layers a rank holds at each moment (at most one here, without prefetch)."""
    layers = 3
    events = []  # (row, start, width, colour, text)
    t = 0.0
    held = []
    for i in range(layers):
        events += [("comm", t, 0.6, "plum", f"AG W{i}"), ("compute", t + 0.6, 1.0, "tab:blue", f"fwd {i}")]
        held.append((t, t + 1.6))
        t += 1.6
    for i in reversed(range(layers)):
        events += [
            ("comm", t, 0.6, "plum", f"AG W{i}"),
            ("compute", t + 0.6, 2.0, "tab:orange", f"bwd {i}"),
            ("comm", t + 2.6, 0.6, "khaki", f"RS dW{i}"),
        ]
        held.append((t, t + 2.6))
        t += 2.6
    fig, ax = plt.subplots(figsize=(11, 2.6))
    rows = {"compute": 1.1, "comm": 0.1}
    for row, start, w, colour, text in events:
        _box(ax, start, rows[row], w, 0.8, colour, text, fontsize=7)
    for start, end in held:
        ax.plot([start, end], [2.2, 2.2], color="black", lw=3)
    ax.text(0, 2.4, "a full layer's weight is held (gathered, then freed)", fontsize=8)
    ax.set_yticks([0.5, 1.5], ["communication", "compute"])
    ax.set_xlim(0, t + 0.8)
    ax.set_ylim(0, 2.8)
    ax.set_xlabel("time (no prefetch: each all-gather waits for the previous layer; prefetch overlaps them)")
    ax.set_title("FSDP (ZeRO-3): gather, compute, free per layer; reduce-scatter each weight's gradient", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


FIGURE_FUNCS = {
    "ring": (draw_ring, "ring_reduce_scatter_all_gather.png"),
    "tp": (draw_tp, "tp_mlp_f_g.png"),
    "pipeline": (draw_pipeline, "gpipe_vs_1f1b.png"),
    "zero": (draw_zero, "zero_stages.png"),
    "fsdp": (draw_fsdp, "fsdp_timeline.png"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=sorted(FIGURE_FUNCS), help="draw one figure of parts 1-6")
    parser.add_argument("--skip-others", action="store_true", help="do not run the other parts' figure scripts")
    parser.add_argument("--out-dir", type=Path, default=FIGURES)
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for key, (draw, name) in FIGURE_FUNCS.items():
        if args.only in (None, key):
            draw(args.out_dir / name)
            print(f"wrote {args.out_dir / name}")
    if args.only is None and not args.skip_others:
        for script in OTHER_SCRIPTS:
            print(f"running scripts/{script}")
            subprocess.run([sys.executable, str(ROOT / "scripts" / script)], check=True, cwd=ROOT)


if __name__ == "__main__":
    main()
