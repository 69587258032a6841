"""Part 11's figures: the given block coloured by the mesh axes that split it (capstone_mesh_blocks.png)
and one training step's communication, from a real trace (capstone_step_timeline.png).

    python -m scripts.figures.parallelize                 # both, into handouts/figures/
    python -m scripts.figures --only capstone_step_timeline.png

``draw_mesh_blocks`` is drawn from the layout parallelize.py's docstrings state: the
sizes are the default ``TransformerConfig`` (H = 6 query heads, K = 2 key/value heads) on tp = cp = pp = 2.
``draw_step_timeline`` runs the reference's ``parallelize(...).train_step`` on 4 gloo ranks of the test
harness (pp2 × tp2, a small model; ``--impl student`` for yours), records three steps after a warm-up with
the tests' ``CommRecorder`` as ``--comm-trace`` does, and draws the quickest with scripts/tools/trace.py,
each call coloured by the mesh axis of its group. It takes ~5 s on a 2-core machine (starting the ranks
is most of it); its times differ from run to run, its shape does not.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from matplotlib import pyplot as plt
from matplotlib.colors import to_rgb
from matplotlib.patches import Patch, Rectangle

from scripts.figures.palette import AXES, COMM, FIGURE_DIR, IDLE, NOTE, SPARE, WORK, arrow, save

# The mesh axes' colours: Part 7's three, and the two this part adds.
MESH = {**AXES, "cp": "tab:purple", "ep": "tab:brown"}
# How a tensor is split: (face colour, alpha, hatch, legend text).
SPLIT = {
    "tp": (MESH["tp"], 0.45, None, "tp: by heads / hidden features (weights)"),
    "sp": (MESH["tp"], 0.22, "///", "tp: by sequence (sequence parallel)"),
    "cp": (MESH["cp"], 0.35, "..", "cp: by sequence, zigzag"),
    "ep": (MESH["ep"], 0.45, None, "ep: by experts"),
    "rep": (IDLE, 0.9, None, "replicated over tp and cp (own tokens: grads summed over tp)"),
    "comm": (COMM, 1.0, None, "communication"),
}


def _tensor(ax, x, y, w, h, splits, text="", fontsize=8) -> None:
    """A box cut into vertical strips, one per split (a tensor cut by two axes shows both)."""
    step = w / len(splits)
    for i, s in enumerate(splits):
        colour, alpha, hatch, _ = SPLIT[s]
        ax.add_patch(Rectangle((x + i * step, y), step, h, facecolor=colour, alpha=alpha, hatch=hatch, lw=0))
    ax.add_patch(Rectangle((x, y), w, h, fill=False, edgecolor="black", lw=0.8))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize,
                bbox=dict(boxstyle="round,pad=0.2", facecolor="white", alpha=0.9, lw=0))  # fmt: skip


def _row(ax, y, title, items, x0=6.0, w=2.15, gap=0.45, h=1.3) -> None:
    """One sub-layer, left to right: ``items`` are (splits, text, shape on the arrow after it)."""
    ax.text(x0, y + h + 0.25, title, fontsize=9, weight="bold", va="bottom")
    for i, (splits, text, after) in enumerate(items):
        x = x0 + i * (w + gap)
        _tensor(ax, x, y, w, h, splits, text)
        if i < len(items) - 1:
            arrow(ax, (x + w, y + h / 2), (x + w + gap, y + h / 2))
            if after:
                ax.text(x + w + gap / 2, y - 0.12, after, ha="center", va="top", fontsize=7, color=NOTE)


def _pipeline(ax) -> None:
    """The model as a column of layers, banded by pipeline stage (pp = 2, 4 blocks)."""
    layers = ["embed", "block0", "block1", "block2", "block3", "head: norm, out"]
    top, h, gap = 15.2, 1.05, 0.35
    ax.text(0.3, top + h + 0.45, "the model on pp = 2 stages", fontsize=9, weight="bold", va="bottom")
    for stage, (first, last) in enumerate([(0, 2), (3, 5)]):
        y_top = top - first * (h + gap) + h + 0.15
        y_bot = top - last * (h + gap) - 0.15
        ax.add_patch(Rectangle((0.2, y_bot), 4.7, y_top - y_bot, facecolor=MESH["pp"],
                               alpha=0.10 + 0.12 * stage, lw=0))  # fmt: skip
        ax.text(4.75, y_bot + 0.1, f"stage {stage}\n(pp rank {stage})", fontsize=7, color=MESH["pp"],
                ha="right", va="bottom")  # fmt: skip
    for i, name in enumerate(layers):
        y = top - i * (h + gap)
        if name.startswith("block"):  # drawn whole on the right
            ax.add_patch(Rectangle((0.5, y), 2.6, h, facecolor="white", edgecolor="black", lw=0.8))
            ax.text(1.8, y + h / 2, f"{name}  ▸", ha="center", va="center", fontsize=7.5)
        else:
            _tensor(ax, 0.5, y, 2.6, h, ["rep"], name)
        if i:
            arrow(ax, (1.8, y + h + gap), (1.8, y + h))
    ax.text(0.3, 5.9, "whole blocks per stage (split_into_stages);\nembed on the first, head and loss/tp\n"
            "on the last; (b, S/(cp·tp), d) between\nstages (send/recv over pp)", fontsize=7, va="top")  # fmt: skip
    ax.text(0.3, 3.7, "every rank, every tensor: batch rows\ncut over the data axes dp (and ep)\n"
            "weights: replicated over dp (ddp,\nzero1) or sharded 1/dp (fsdp, hsdp);\ngradients averaged "
            "over dp, ep, cp", fontsize=7, va="top", color=MESH["dp"])  # fmt: skip


def _gqa(ax, x0, y0) -> None:
    """Query heads and the key/value heads they read, coloured by the tp rank that holds them (T = 2)."""
    H, K, T = 6, 2, 2
    ax.text(x0, y0 + 3.3, "GQA under tp = 2 (H = 6, K = 2): rank t holds\nquery heads t·H/T.. and kv heads t·K/T..",
            fontsize=8, va="bottom")  # fmt: skip
    shade = [1.0, 0.45]
    for h in range(H):
        t = h // (H // T)
        _box_alpha(ax, x0 + 0.2 + h * 1.1, y0 + 2.0, 0.9, 0.8, MESH["tp"], shade[t], f"q{h}\nt{t}")
    for k in range(K):
        t = k // (K // T)
        xk = x0 + 0.2 + (k * (H // K) + 1) * 1.1
        _box_alpha(ax, xk, y0 + 0.3, 0.9, 0.8, MESH["tp"], shade[t], f"kv{k}\nt{t}")
        for h in range(k * (H // K), (k + 1) * (H // K)):
            ax.plot([x0 + 0.65 + h * 1.1, xk + 0.45], [y0 + 2.0, y0 + 1.1], color=NOTE, lw=0.7)
    ax.text(x0 + 0.2, y0 - 0.05, "query head h reads kv head h // (H/K): each rank's kv heads\nare exactly "
            "the ones its query heads read (tp must divide K)", fontsize=6.5, va="top", color=NOTE)  # fmt: skip


def _box_alpha(ax, x, y, w, h, colour, alpha, text) -> None:
    ax.add_patch(Rectangle((x, y), w, h, facecolor=colour, alpha=alpha * 0.6, edgecolor="black", lw=0.6))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=6.5)


def _tokens(ax, x0, y0, S=16, cp=2, tp=2) -> None:
    """Which rank of cp × tp holds each of S tokens: zigzag over cp, then contiguous over tp (SP)."""
    chunk = S // (2 * cp)
    owner = {}
    for c in range(cp):
        mine = list(range(c * chunk, (c + 1) * chunk)) + list(range((2 * cp - 1 - c) * chunk, (2 * cp - c) * chunk))
        for t in range(tp):
            for pos in mine[t * len(mine) // tp : (t + 1) * len(mine) // tp]:
                owner[pos] = (c, t)
    ax.text(x0, y0 + 3.3, f"the tokens of one sequence (S = {S}) on cp = {cp} × tp = {tp}:\nzigzag chunks "
            "c and 2cp−1−c, then the t-th contiguous 1/tp", fontsize=8, va="bottom")  # fmt: skip
    w = 0.74
    cp_alpha, tp_hatch = [0.55, 0.2], [None, "///"]
    for pos in range(S):
        c, t = owner[pos]
        x = x0 + 0.2 + pos * w
        ax.add_patch(Rectangle((x, y0 + 1.6), w, 0.9, facecolor=MESH["cp"], alpha=cp_alpha[c], lw=0))
        ax.add_patch(Rectangle((x, y0 + 1.6), w, 0.9, fill=False, hatch=tp_hatch[t], edgecolor="black", lw=0.5))
        ax.text(x + w / 2, y0 + 2.7, str(pos), ha="center", fontsize=6)
        ax.text(x + w / 2, y0 + 1.3, f"c{c}\nt{t}", ha="center", va="top", fontsize=6.5)
    ax.text(x0 + 0.2, y0 - 0.05, "RoPE rotates each token by its global position (the number above),\n"
            "not its place in the rank's shard", fontsize=6.5, va="top", color=NOTE)  # fmt: skip


def draw_mesh_blocks(path: Path) -> Path:
    """One block of the given model on a dp × pp × cp × tp (× ep) mesh: every weight and activation
    coloured by the axes that split it (as parallelize.py's docstrings split them)."""
    fig, ax = plt.subplots(figsize=(15, 9.2))
    ax.set_xlim(0, 30.2)
    ax.set_ylim(-2.0, 17.0)
    ax.axis("off")
    _pipeline(ax)
    ax.add_patch(Rectangle((5.7, 5.0), 24.4, 10.9, facecolor=SPARE, lw=0, zorder=-1))
    attention = [
        (["cp", "sp"], "x\n(b, s, d)", "(s, b, d)"),
        (["rep"], "attn_norm\n(d,)", ""),
        (["comm"], "all-gather\nover tp", "(S/cp, b, d)"),
        (["tp"], "wq (H/tp·hd, d)\nwk, wv\n(K/tp·hd, d)", "q, k, v"),
        (["tp", "cp"], "RoPE at the\ntokens' global\npositions", "k, v repeated\nto H/tp heads"),
        (["cp"], "ring attention\nover cp (causal,\nzigzag)", "(S/cp, b, H/tp·hd)"),
        (["tp"], "wo (d, H/tp·hd)\ncolumns:\npartial sums", "(S/cp, b, d)"),
        (["comm"], "reduce-scatter\nover tp", "(s, b, d)"),
        (["cp", "sp"], "+ x", ""),
    ]
    _row(ax, 13.6, "attention: split by heads over tp, by sequence over cp", attention)
    ffn = [
        (["cp", "sp"], "h\n(s, b, d)", ""),
        (["rep"], "ffn_norm\n(d,)", ""),
        (["comm"], "all-gather\nover tp", "(S/cp, b, d)"),
        (["tp"], "w_gate, w_up\n(F/tp, d)\nrows", "(S/cp, b, F/tp)"),
        (["tp", "cp"], "SiLU(gate)\n· up", ""),
        (["tp"], "w_down (d, F/tp)\ncolumns:\npartial sums", "(S/cp, b, d)"),
        (["comm"], "reduce-scatter\nover tp", "(s, b, d)"),
        (["cp", "sp"], "+ h", ""),
    ]
    _row(ax, 10.0, "SwiGLU: hidden features over tp (gate and up by rows, down by columns)", ffn)
    moe = [
        (["cp", "sp"], "h\n(s, b, d)", ""),
        (["rep"], "ffn_norm\n(d,)", ""),
        (["rep"], "router\n(E, d)", "top-k"),
        (["comm"], "all-to-all\nover ep", ""),
        (["ep"], "experts\nE/ep per rank", ""),
        (["comm"], "all-to-all\nover ep", "(s, b, d)"),
        (["cp", "sp"], "+ h", ""),
    ]
    _row(ax, 6.4, "or, an MoE block: this rank's own tokens (no tp communication), experts over ep", moe)
    ax.text(6.0, 5.3, "s = S/(cp·tp): this rank's tokens.  Sequence first inside a block; one all-gather and one "
            "reduce-scatter per sub-layer and pass (their backward swaps them).", fontsize=7, color=NOTE)  # fmt: skip
    _gqa(ax, 6.0, 0.4)
    _tokens(ax, 17.6, 0.4)
    handles = [Patch(facecolor=c, alpha=a, hatch=hh, edgecolor="black", label=t) for c, a, hh, t in SPLIT.values()]
    handles.append(Patch(facecolor=MESH["pp"], alpha=0.2, label="pp: whole blocks per stage"))
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncol=4, fontsize=8, frameon=False)
    fig.tight_layout()
    return save(fig, path)


# -- one training step's timeline, from a trace -------------------------------------------------------

STEP_MESH = {"dp": 1, "pp": 2, "cp": 1, "tp": 2}  # 4 ranks: rank = 2·pp + tp
STEP_BATCH, STEP_SEQ, STEP_MICROBATCHES = 8, 32, 4
STEP_TRIES = 3  # steps recorded after the warm-up; the figure draws the quickest
TINT = {k: tuple(1 - 0.3 * (1 - c) for c in to_rgb(WORK[k])) for k in "FB"}  # pale forward, backward


def one_training_step(ctx, directory: str) -> dict:
    """Every rank: parallelize a small model on STEP_MESH, take one warm-up step, then record STEP_TRIES
    steps (CommRecorder, writing step i's rank file under ``directory``/step<i> as CS336_TRACE=DIR does),
    with the wall-clock span of every chunk's forward and backward (module and tensor hooks) and of the
    optimizer step. Returns the rank's coordinates and, per recorded step, its spans, start and end."""
    import torch

    from cs336_systems.transformer import CharTokenizer, Transformer, TransformerConfig, get_batch, make_corpus
    from tests.harness import trace as _trace
    from tests.harness.recorder import CommRecorder

    torch.manual_seed(0)
    M, P = ctx.load("mesh"), ctx.load("parallelize")
    mesh = M.ProcessMesh(STEP_MESH)
    cfg = TransformerConfig(d_model=64, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=128)
    pt = P.parallelize(Transformer(cfg, seed=0), mesh, num_microbatches=STEP_MICROBATCHES, lr=1e-3)
    data = CharTokenizer().encode(make_corpus(20_000))
    marks: list[tuple[str, float, float]] = []
    open_marks: dict[str, float] = {}
    count = {"F": 0, "B": 0}

    def begin(kind: str) -> None:
        open_marks[kind] = time.perf_counter()

    def end(kind: str) -> None:
        if kind in open_marks:
            marks.append((f"{kind}{count[kind]}", open_marks.pop(kind), time.perf_counter()))
            count[kind] += 1

    def on_input(_module, args):
        begin("F")
        if args and isinstance(args[0], torch.Tensor) and args[0].requires_grad:
            args[0].register_hook(lambda g: end("B"))  # the gradient of the chunk's input: its backward ends

    def on_output(_module, _args, out):
        end("F")
        if out.requires_grad:
            out.register_hook(lambda g: begin("B"))  # the gradient of its output arrives: its backward starts

    for chunk in pt.chunks:  # a chunk's first block, not the embedding: its input carries a gradient
        layers = list(chunk.children())
        first = next(m for m in layers if isinstance(m, P.ParallelBlock))
        first.register_forward_pre_hook(on_input)
        layers[-1].register_forward_hook(on_output)
    adamw_step = pt.optimizer.step

    def timed_step(*args, **kwargs):
        t0 = time.perf_counter()
        out = adamw_step(*args, **kwargs)
        marks.append(("AdamW", t0, time.perf_counter()))
        return out

    pt.optimizer.step = timed_step
    steps = []
    saved = _trace.TRACE_DIR
    for step in range(1 + STEP_TRIES):  # step 0 warms up (first calls allocate and build caches)
        x, y = get_batch(data, STEP_BATCH, STEP_SEQ, step, seed=0)
        marks.clear()
        count.update(F=0, B=0)
        torch.distributed.barrier()
        start = time.perf_counter()
        # What CS336_TRACE=DIR sets at import: the recorder writes its rank file under DIR/.ranks.
        _trace.TRACE_DIR = f"{directory}/step{step}" if step else None
        try:
            with CommRecorder():
                pt.train_step(x, y)
        finally:
            _trace.TRACE_DIR = saved
        steps.append({"marks": list(marks), "start": start, "end": time.perf_counter()})
    return {"coords": mesh.coords(), "steps": steps[1:]}


def _axis_of_groups(shape: dict[str, int]) -> dict[tuple[int, ...], str]:
    """{the global ranks of a slice: its axis} for every axis of size > 1, laid out as ``ProcessMesh`` does
    (row-major, last axis fastest)."""
    import numpy as np

    grid = np.arange(int(np.prod(list(shape.values())))).reshape(list(shape.values()))
    return {tuple(ranks): axis for i, (axis, n) in enumerate(shape.items()) if n > 1
            for ranks in np.moveaxis(grid, i, -1).reshape(-1, n).tolist()}  # fmt: skip


def draw_step_timeline(path: Path, impl: str | None = None) -> Path:
    """One training step of ``impl``'s ``parallelize`` on pp2 × tp2 (4 gloo ranks), from its communication
    trace: one row per rank, forward and backward of each microbatch shaded, each call coloured by the mesh
    axis of its group (tp red, pp blue)."""
    from scripts.bench.common import default_impl
    from scripts.tools.trace import draw_rows, rows_of
    from tests.harness import run_ranks
    from tests.harness.pool import shutdown_pools
    from tests.harness.trace import merge_test_trace

    with tempfile.TemporaryDirectory() as directory:
        try:
            outs = run_ranks(4, one_training_step, directory, impl=impl or default_impl(), deadline=120)
        finally:
            shutdown_pools()
        # The least disturbed of the recorded steps (a shared machine's other work stretches some).
        spans = [max(o["steps"][i]["end"] for o in outs) - min(o["steps"][i]["start"] for o in outs)
                 for i in range(STEP_TRIES)]  # fmt: skip
        best = spans.index(min(spans))
        origin = min(o["steps"][best]["start"] for o in outs)
        trace = merge_test_trace(f"{directory}/step{best + 1}", "step", [("step", origin, origin)])
        ranks = [events for name, events in rows_of(trace) if name.startswith("rank")]  # ranks 0, 1, ...
    by_group = _axis_of_groups(STEP_MESH)
    rows = []
    for r, (events, out) in enumerate(zip(ranks, outs)):
        calls = [e for e in events if e["cat"] != "phase"]  # not the recorded region: the whole step
        for e in calls:  # an async send/recv at the moment it was posted (its wait comes at the step's end)
            e["dur"] = 1.0 if e["args"]["async"] else e["dur"]
            e["tid"] = 2 if by_group.get(tuple(e["args"]["group"])) == "pp" else 1  # pp below tp
        phases = [{"name": label, "cat": "phase", "ts": (t0 - origin) * 1e6, "dur": (t1 - t0) * 1e6}
                  for label, t0, t1 in out["steps"][best]["marks"]]  # fmt: skip
        rows.append((f"rank {r}\npp {out['coords']['pp']}, tp {out['coords']['tp']}", phases + calls))
    end_ms = max((e["ts"] + e["dur"]) / 1e3 for _, events in rows for e in events)

    def colour(e: dict) -> str:
        return MESH.get(by_group.get(tuple(e["args"]["group"]), ""), COMM)

    def phase_colour(e: dict) -> str:
        return TINT.get(e["name"][0], IDLE)

    fig, ax = plt.subplots(figsize=(12, 4.2))
    draw_rows(ax, rows, colour=colour, phase_colour=phase_colour, min_ms=end_ms / 400)
    ax.set_xlim(0, end_ms * 1.01)
    ax.set_yticks(range(len(rows)), [label for label, _ in rows], fontsize=8)
    ax.set_xlabel("ms since the step started (wall clock, 4 gloo processes on a CPU)", fontsize=8)
    ax.set_title(f"one train_step of parallelize on pp2 × tp2 ({STEP_MICROBATCHES} microbatches, 1F1B)", fontsize=10)
    handles = [Patch(facecolor=TINT["F"], edgecolor="grey", label="forward of microbatch i (Fi)"),
               Patch(facecolor=TINT["B"], edgecolor="grey", label="backward (Bi)"),
               Patch(facecolor=IDLE, edgecolor="grey", label="AdamW step"),
               Patch(facecolor=MESH["tp"], edgecolor="black", label="call on a tp group"),
               Patch(facecolor=MESH["pp"], edgecolor="black", label="send/recv on a pp group")]  # fmt: skip
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=5, fontsize=7.5, frameon=False)
    fig.tight_layout()
    return save(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", type=Path, default=FIGURE_DIR, help="folder (default handouts/figures/)")
    parser.add_argument("--impl", default=None, help="whose parallelize to trace (default: the reference if present)")
    args = parser.parse_args()
    print(draw_mesh_blocks(args.out_dir / "capstone_mesh_blocks.png"))
    print(draw_step_timeline(args.out_dir / "capstone_step_timeline.png", impl=args.impl))


if __name__ == "__main__":
    main()
