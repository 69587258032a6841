"""Answer key, Part 5 (handouts/05-pipeline.md, "Measure it"). Numbers from accounting.

The section is "5.9 Measure it" since the V schedules (5.7, 5.8) came; its problems 11-13 (on the V schedules)
are keyed by their author.
"""

from __future__ import annotations

from reference_solutions import accounting as acc
from scripts.grading.answer_key import Problem, Section, num

P, M = 4, 8  # the example used below (the benchmark's p = 4 rows)
GPIPE = acc.schedule_bubble_fraction("gpipe", P, M)
ONE_F = acc.schedule_bubble_fraction("1f1b", P, M)
ZB = acc.schedule_bubble_fraction("zb-h1", P, M)
PEAK_1F1B = [acc.schedule_peak_activations("1f1b", P, M, s) for s in range(P)]
PEAK_ZB = [acc.schedule_peak_activations("zb-h1", P, M, s) for s in range(P)]


def min_microbatches(p: int, bubble_below: float) -> int:
    """Problem 5: the smallest m with (p − 1)/(m + p − 1) < ``bubble_below``."""
    return next(m for m in range(1, 100_000) if acc.pipeline_bubble_fraction(p, m) < bubble_below)


P16, BUBBLE_MAX = 16, 0.1  # problem 5's inputs
M_FOR_P16 = min_microbatches(P16, BUBBLE_MAX)
GPIPE_OVER_1F1B_P16 = M_FOR_P16 / min(P16, M_FOR_P16)  # stage 0 holds m (GPipe) vs min(p, m) (1F1B)
BUBBLE_AT_M_EQ_P = acc.pipeline_bubble_fraction(P16, P16)  # the common wrong answer m = p

# 8. Choosing v: p = 8, m = 16, forward 40 ms (backward 2x), 1 ms per message exchange, 2 v m exchanges per stage.
P8, M8, FWD, MSG = 8, 16, 40.0, 1.0


def step_ms(v: int) -> float:
    return M8 * 3 * FWD / (1 - acc.pipeline_bubble_fraction(P8, M8, v)) + 2 * v * M8 * MSG


def peak_stages(v: int) -> float:
    """Stage 0's peak in stages' worth of one microbatch's activations (a chunk's is 1/v of a stage's)."""
    return acc.schedule_peak_activations("interleaved" if v > 1 else "1f1b", P8, M8, 0, v) / v


V_ROWS = [(v, acc.pipeline_bubble_fraction(P8, M8, v), step_ms(v), peak_stages(v)) for v in (1, 2, 4, 8)]
BEST_V = min(V_ROWS, key=lambda r: r[2])[0]

# 9. Where checkpointing pays: 1F1B stage 0 of p = 8 (holds min(p, m) = 8 microbatches), 4 layers per stage.
HELD = acc.schedule_peak_activations("1f1b", 8, 16, 0)
NO_CKPT = acc.pipeline_activation_bytes(HELD, 4 * 34, 2)
CKPT = acc.pipeline_activation_bytes(HELD, 4 * 34, 2, checkpoint=True)


def _half(what: str) -> tuple:
    return ((0.5, what),)


# 11. p = 4, m = 8, one chunk's F = B = W = 1 (a stage is two chunks).
P4, M_V = 4, 8
IL = "interleaved v = 2"
V_BUBBLES = {
    "interleaved v = 2": acc.schedule_bubble_fraction("interleaved", P4, M_V, num_chunks=2),
    "ZB-H1": acc.schedule_bubble_fraction("zb-h1", P4, M_V),
    "ZB-V": acc.zbv_bubble_fraction(P4, M_V),
}
# Peak activations of stage / rank 0, in units of a whole stage's microbatch (two chunks).
V_PEAKS = {
    "interleaved v = 2": acc.schedule_peak_activations("interleaved", P4, M_V, 0, num_chunks=2) / 2,
    "ZB-H1": acc.schedule_peak_activations("zb-h1", P4, M_V, 0),
    "ZB-V": acc.zbv_peak_activations(P4, M_V) / 2,
}
ZBV_CHEAP_W = acc.zbv_bubble_fraction(P4, M_V, 1.0, 1.0, 0.25)

# 12. p = 4, m = 16; a chunk's forward computes 1 and communicates 1 (F = 2), its input-gradient half likewise
# (2), its weight gradient computes 1 (W = 1, whole B = 3); an overlapped pair F&B = 3 (without overlap 5).
M12, F12, B12, W12 = 16, 2.0, 3.0, 1.0


def _dualpipev(fb: float) -> tuple[float, float, float]:
    """(bubble, idle, step) of DualPipeV's rank p - 1 with F&B = fb."""
    idle = (P4 - 1) * (fb + B12 - 3 * W12)
    busy = (2 * M12 - 2 * P4 - 1) * fb + (2 * P4 + 1) * (F12 + B12)
    bubble = acc.dualpipev_bubble_fraction(P4, M12, F12, B12, W12, overlapped_time=fb)
    assert abs(bubble - idle / (busy + idle)) < 1e-12  # the handout's formula, as the function computes it
    return bubble, idle, busy + idle


DPV_OVERLAP, DPV_PLAIN = _dualpipev(3.0), _dualpipev(F12 + B12)
ZBV_BUBBLE = acc.zbv_bubble_fraction(P4, M12, F12, B12 - W12, W12)
ZBV_IDLE = (P4 - 1) * max(B12 - W12, 2 * (B12 - W12 - W12))
ZBV_STEP = 2 * M12 * (F12 + B12) + ZBV_IDLE

SECTIONS = (
    Section(
        part=5,
        heading="5.9 Measure it",
        problems=(
            Problem(
                "1",
                "The GPipe bubble",
                0.5,
                f"""With a backward of 2F (B + W): stage s idles s·F at the start (waiting for the first
microbatch), 3(p − 1 − s)·F between its last forward and its first backward (the last stage's backward runs
first), and 2s·F at the end (its backwards are done while later stages still drain): 3(p − 1)·F per stage
whatever s, out of a step of 3(m + p − 1)·F: (p − 1)/(m + p − 1); p = {P}, m = {M}: {GPIPE:.4f}
(`schedule_bubble_fraction("gpipe", {P}, {M})`).""",
                rubric=_half("the idle triangles located per stage, total 3(p − 1)F of 3(m + p − 1)F"),
            ),
            Problem(
                "2",
                "1F1B's warm-up and memory",
                0.5,
                f"""Stage s runs min(p − s, m) forwards before its first backward: stage 0 **{min(P, M)}**, stage 3
**{min(1, M)}** (p = {P}). It holds at most min(p − s, m) microbatches' activations: {PEAK_1F1B} for stages
0..3, against GPipe's m = {M} on every stage.""",
                given=("p = 4, m = 8",),
                rubric=((0.25, f"{min(P, M)} and 1 forwards"), (0.25, "peak min(p − s, m) against GPipe's m")),
            ),
            Problem(
                "3",
                "Why 1F1B does not shrink the bubble",
                0.5,
                """The fill and drain are the same: every stage still waits (p − 1) forward+backward times in total
for the first activation to arrive and the last gradient to come back; 1F1B only reorders the work in between,
so both charts last (m + p − 1)(F + B + W). What it buys is memory: a microbatch's activations are freed after
its backward, which starts as soon as possible, so a stage holds min(p − s, m) instead of m.""",
                rubric=((0.25, "same fill and drain, (p − 1) units"), (0.25, "the gain is peak activations, not time")),
            ),
            Problem(
                "4",
                "Why the measured bubble is above the formula",
                0.5,
                """Every microbatch crosses every stage boundary twice (activation forward, gradient backward), and
each crossing costs a message's latency plus the Python around it; a stage that needs its neighbour's output
waits that long each time, 2m times per step, so the extra idle grows with m while the formula's (p − 1)
units do not. In the chart: thin gaps before each F or B of a stage that had to wait for a neighbour's message.""",
                expect=(
                    "Reference on the 2-core VM (F = B = W = 25 ms): idle, every cell within 2.3 points of "
                    "`schedule_bubble_fraction`, most within 1; under load (one run at load 6) within 3.3, "
                    "interleaved v = 4 furthest (2.7-3.3 points); e.g. p = 4: GPipe m = 8 at 28.1% against 27.3%, "
                    "1F1B m = 32 at 10.0% against 8.6%.",
                    "Signs of a wrong implementation: a measured bubble far above the formula at m ≥ 8 (> 5 "
                    "points: blocking sends serialising the stages), or below it (a stage skipping work).",
                ),
                rubric=_half("message latency per boundary crossing, 2m waits per step, grows with m"),
            ),
            Problem(
                "5",
                "16 stages",
                0.5,
                f"""(p − 1)/(m + p − 1) < {BUBBLE_MAX} with p = {P16}: m + {P16 - 1} > {(P16 - 1) / BUBBLE_MAX:g},
**m = {M_FOR_P16}**. GPipe then holds all {M_FOR_P16} microbatches' activations on every stage (memory ∝ m,
**{GPIPE_OVER_1F1B_P16:.1f}×** 1F1B's stage 0); 1F1B holds at most p = {P16} on stage 0 (and p − s on stage s),
independent of m.""",
                given=("16 stages", "under 10%"),
                rubric=(
                    (0.25, f"m = {M_FOR_P16} (m = {M_FOR_P16 - 1} gives exactly 10%: accept either with the reason)"),
                    (0.25, f"GPipe holds m = {M_FOR_P16}, 1F1B ≤ p = {P16}: {GPIPE_OVER_1F1B_P16:.1f}×"),
                ),
                wrong=(f"m = {P16} (the bubble is then {BUBBLE_AT_M_EQ_P:.0%}): 0 of the first 0.25.",),
            ),
            Problem(
                "6",
                "ZB-H1 against 1F1B",
                0.5,
                f"""Where 1F1B idles in its cool-down (and where a stage waits for a gradient in the steady state),
ZB-H1 runs a deferred W (weight-gradient half), which depends on no neighbour. Measured bubble below 1F1B's at
the same m: formula {ZB:.4f} against {ONE_F:.4f} at p = {P}, m = {M} with F = B = W (ZB-H1 idles (p − 1) units
against 1F1B's 3(p − 1)). Peak activations: ZB-H1 {PEAK_ZB}, 1F1B {PEAK_1F1B}: the same on stage 0 (1F1B's
peak), more on later stages (a W holds its microbatch's activations until it runs).""",
                expect=(
                    "Reference (p = 4, F = B = W): ZB-H1 measured 13.0% against 1F1B's 28.1% at m = 8 and 8.6% "
                    "against 16.5% at m = 16 (formulas 11.1% and 27.3%, 5.9% and 15.8%), within 3 points of its "
                    "formula; stage 0 peak activations 4 for both.",
                    "Sign of a wrong implementation: ZB-H1's bubble at or above 1F1B's (W not deferred to fill the "
                    "gaps, or B and W run back to back), or peak activations above p on stage 0.",
                ),
                rubric=(
                    (0.25, "W fills the cool-down gaps, and the measured bubble is below 1F1B's"),
                    (0.25, "the same stage-0 peak as 1F1B, more on later stages"),
                ),
            ),
            Problem(
                "7",
                "Interleaved v = 4 with split chunk time",
                0.5,
                """With `--chunk-time split` a chunk's forward is F/v (6.25 ms at v = 4) while the messages per
step grow v-fold (each microbatch crosses v·p − 1 chunk boundaries forward and as many backward, 2vm exchanges
per stage). The per-message latency (~0.5-1 ms on gloo with Python) is no longer small against a 6 ms chunk, so
the waits the formula ignores grow as v while the bubble it predicts shrinks as 1/v: v = 4 lands furthest
above its formula.""",
                rubric=_half("messages ∝ v, chunk compute ∝ 1/v: latency no longer negligible"),
            ),
            Problem(
                "8",
                "Choosing v",
                0.5,
                "Model (backward = 2 × forward): step = m(F + B)/(1 − bubble) + 2vm · 1 ms, bubble = (p − 1)/(vm + "
                "p − 1), p = 8, m = 16, F = 40 ms. "
                + "; ".join(
                    f"v = {v}: bubble {b:.3f}, step {num(t)} ms, stage 0 peak {pk:.2f} stages' worth"
                    for v, b, t, pk in V_ROWS
                )  # fmt: skip
                + f". Pick **v = {BEST_V}**: beyond it the messages cost more than the bubble saves. Every v > 1 "
                "raises stage 0's peak activations (in units of a stage's microbatch activations) above 1F1B's "
                f"p = {num(V_ROWS[0][3])}: more microbatches are in flight during the longer warm-up; the rise is "
                f"largest at v = 2 ({num(V_ROWS[1][3])}) and shrinks toward p as v grows (a chunk is 1/v of a stage).",
                rubric=(
                    (0.25, f"the four step times (± 5%, any consistent B) and v = {BEST_V} (4-8 with the model)"),
                    (
                        0.25,
                        f"peaks {', '.join(num(r[3]) for r in V_ROWS)}: above p for every v > 1, largest at v = 2",
                    ),
                ),  # fmt: skip
            ),
            Problem(
                "9",
                "Where checkpointing pays",
                0.5,
                f"""Stage 0 of 1F1B with p = 8 (m ≥ 8) holds {HELD} microbatches; 4 layers save 4·34 = 136·sbh and the
stage input is 2·sbh. `pipeline_activation_bytes({HELD}, 136, 2)` = **{num(NO_CKPT)}·sbh** without checkpointing,
`…, checkpoint=True)` = {HELD}·2 + 136 = **{num(CKPT)}·sbh** with ({NO_CKPT / CKPT:.1f}× less). It pays when
the memory freed lets the microbatch size or m grow enough (or a smaller pp / TP degree, or a model that
otherwise does not fit) that the gain in throughput exceeds the recompute's cost: 8ND instead of 6ND, i.e. MFU
= 3/4 HFU, 33% more compute. Early stages gain most (stage s holds p − s microbatches: stage 0 p, the last 1),
so checkpoint only the first stages, where activations peak.""",
                given=("34·s·b·h", "2·s·b·h", "p = 8, m = 16", "4 layers per stage"),
                rubric=(
                    (0.25, f"{num(NO_CKPT)}·sbh and {num(CKPT)}·sbh"),
                    (0.25, "early stages hold the most microbatches: checkpoint those"),
                ),
            ),
            Problem(
                "10",
                "DualPipe",
                0.5,
                """Drawing for p = 4: direction A's microbatches enter at rank 0 (chunks 0→3 on ranks 0..3),
direction B's at rank 3 (its chunk r on rank 3 − r); in the first steps rank 0 runs A's forwards while rank 3
runs B's, and each rank's idle start in one direction is filled with the other direction's work (the warm-up of
one overlaps the other's), likewise at the end. Cost: each rank holds two chunks (r of A and p − 1 − r of B), 2×
the parameters (and their gradients/optimizer state) of a plain stage; activations: a rank holds microbatches of
both directions, about p + 1 in flight instead of p − s, more balanced across ranks.""",
                rubric=(
                    (0.25, "each direction's work fills the other's fill and drain"),
                    (0.25, "2× parameters per rank, and more activations in flight"),
                ),
            ),
            Problem(
                "11",
                "When is a V better than interleaving?",
                1,
                f"""Bubbles at p = 4, m = 8, F = B = W = 1 per chunk: interleaved v = 2 **{V_BUBBLES[IL]:.3f}** (3/19),
ZB-H1 **{V_BUBBLES["ZB-H1"]:.3f}**, ZB-V **{V_BUBBLES["ZB-V"]:.4f}** (3/51). Peak activations of rank 0 in
whole-stage microbatches: interleaved {num(V_PEAKS[IL])}, ZB-H1 {num(V_PEAKS["ZB-H1"])}, ZB-V
{num(V_PEAKS["ZB-V"])} (2p chunks): the V keeps 1F1B's memory with almost no bubble. Messages per microbatch
each way: interleaved 2p − 1 = 7
(including the wrap from rank p − 1 to rank 0), ZB-V 2p − 2 = 6 (the turn at rank p − 1 stays in memory).
With W = 0.25, ZB-V idles (p − 1)·max(B, 2(B − W)) = 4.5 of a 40.5 step: **{ZBV_CHEAP_W:.3f}**, no better than
ZB-H1. Still interleave when you want v > 2 chunks per rank, when m < 2p − 1, when W cannot be split from B
(fused kernels, no weight-gradient hook) or is much cheaper than B.""",
                given=("p = 4, m = 8", "F = B = W = 1", "W = 0.25"),
                rubric=(
                    (0.25, "the three bubbles (±0.005)"),
                    (0.25, "the three peaks (in any consistent unit)"),
                    (0.25, f"ZB-V with W = 0.25 ≈ {ZBV_CHEAP_W:.3f}"),
                    (0.25, "two situations for interleaving"),
                ),
                wrong=("Counting ZB-V's turn at rank p − 1 as a message (7): −0.25.",),
            ),
            Problem(
                "12",
                "What does DualPipe buy when communication is as long as compute?",
                1,
                f"""DualPipeV with the overlap (F&B = 3): idle (p − 1)(F&B + B − 3W) = {num(DPV_OVERLAP[1])}, step
{num(DPV_OVERLAP[2])}, bubble **{DPV_OVERLAP[0]:.3f}**; without it (F&B = F + B = 5): step {num(DPV_PLAIN[2])},
bubble **{DPV_PLAIN[0]:.3f}**. ZB-V with the same times (F = 2, B = 2, W = 1): idle {num(ZBV_IDLE)}, step
{num(ZBV_STEP)}, bubble **{ZBV_BUBBLE:.3f}**. ZB-V has the smaller bubble fraction, DualPipeV the shorter step
({1 - DPV_OVERLAP[2] / ZBV_STEP:.0%} shorter): the overlap removes busy time (each pair hides one side's
communication behind the other's compute), which a bubble fraction, idle over the step, does not count. Compare
step times.""",
                given=("F = 2", "W = 1", "B = 3", "F&B = max(compute 1 + 2, communication 1 + 1) = 3", "p = 4, m = 16"),
                rubric=(
                    (0.5, f"steps {num(DPV_OVERLAP[2])} / {num(DPV_PLAIN[2])} / {num(ZBV_STEP)} or the bubbles (±2%)"),
                    (0.5, "the bubble fraction ignores the busy time the overlap saves: compare step times"),
                ),
                wrong=("Concluding ZB-V is faster from its smaller bubble: 0 of the second 0.5.",),
            ),
            Problem(
                "13",
                "ZB-V and DualPipeV against torch's",
                1,
                """Report the bench's ratios (ours / torch's step time) with their intervals for p = 2 and 4. On
sleeping stages DualPipeV's overlap gains nothing: one thread sleeps through the F and then the B; an overlap pays only
when communication, or a second stream, runs during the compute.""",
                rubric=((0.5, "ratios with intervals for both schedules"), (0.5, "why the overlap gains nothing here")),
                expect=(
                    "The reference on the 2-core VM (F = B = W = 25 ms): ZB-V / torch 0.94 (0.83-1.04) at p = 2, "
                    "0.73 (0.60-1.04) at p = 4; DualPipeV / torch 0.94 (0.81-1.05) and 0.96 (0.83-1.16).",
                    "Measured bubbles within 3 points of the formulas (ZB-V within 1.5; DualPipeV at most 3.2, below "
                    "its formula: the executor starts a pair's F on its own input).",
                    "Signs of a wrong implementation: a ratio above ~1.5 (messages serialised, receives posted late), "
                    "ZB-V's bubble above ZB-H1's at m >= 2p - 1.",
                ),
            ),
        ),
    ),
)
