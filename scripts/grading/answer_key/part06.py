"""Answer key, Part 6 (handouts/06-accounting.md, Written problems). Numbers from accounting."""

from __future__ import annotations

from reference_solutions import accounting as acc
from scripts.grading.answer_key import Problem, Section, num

# 1. 13B on 1T tokens, 256 GPUs of 989 TFLOP/s at 40% MFU.
FLOPS = acc.training_flops(13e9, 1e12)
DAYS = FLOPS / (256 * 989e12 * 0.40) / 86400

# 2. GPT-3 (s = 2048, h = 12288, a = 96), t = 8, b = 1.
S, H, A, T = 2048, 12288, 96, 8
TP_ONLY = acc.activation_memory_per_layer(S, 1, H, A, tp=T)
TP_SP = acc.activation_memory_per_layer(S, 1, H, A, tp=T, sequence_parallel=True)
SAVED = TP_ONLY - TP_SP

# 3. p = 8: the smallest m with a bubble under 10%, plain and with v = 4.
M1 = next(m for m in range(1, 1000) if acc.pipeline_bubble_fraction(8, m) < 0.1)
M4 = next(m for m in range(1, 1000) if acc.pipeline_bubble_fraction(8, m, 4) < 0.1)

SECTIONS = (
    Section(
        part=6,
        heading="Written problems",
        problems=(
            Problem(
                "1",
                "Training time",
                1,
                f"""6ND = 6 · 13e9 · 1e12 = **{num(FLOPS)} FLOPs**; the cluster delivers 256 · 989e12 · 0.40 =
{num(256 * 989e12 * 0.4)} FLOP/s, so {num(FLOPS / (256 * 989e12 * 0.4))} s = **{DAYS:.1f} days**.""",
                given=("13B", "1T tokens", "256 GPUs", "989 TFLOP/s", "40% MFU"),
                rubric=((0.5, "6ND written and evaluated"), (0.5, f"{DAYS:.1f} days (±0.2)")),
                wrong=("2ND (forward only): a third of the time, 0 of 0.5.", "Forgetting the MFU: 3.6 days, −0.5."),
            ),
            Problem(
                "2",
                "What sequence parallelism saves (GPT-3, t = 8)",
                1,
                f"""Per layer, b = 1, 16-bit: TP alone sbh(10 + 24/t + 5as/(ht)) = **{num(TP_ONLY / 2**20)} MiB**;
with SP sbh/t(34 + 5as/h) = **{num(TP_SP / 2**20)} MiB**. SP saves sbh(10 − 10/t) = 8.75·sbh =
**{num(SAVED / 2**20)} MiB** per layer and microbatch, **{SAVED / TP_ONLY:.1%}** of the t = 8 total: the layer
norms' and dropouts' activations that plain TP replicates on every rank. (Per sequence of b: multiply by b.)""",
                given=("s = 2048, h = 12288, a = 96, b = 1", "t = 8"),
                rubric=(
                    (0.5, f"both per-layer numbers or the difference 8.75·sbh = {num(SAVED / 2**20)} MiB (any unit)"),
                    (0.5, f"the fraction, {SAVED / TP_ONLY:.1%} (±1 point)"),
                ),
                wrong=("Saying SP saves the attention scores (5as/h): it splits the 10, not the scores. 0 of 1.",),
            ),
            Problem(
                "3",
                "Microbatches for a 10% bubble",
                1,
                f"""(p − 1)/(m + p − 1) < 0.1 with p = 8 gives m + 7 > 70: **m = {M1}** (m = 63 gives exactly 10%).
With v = 4, (p − 1)/(vm + p − 1) < 0.1 gives 4m > 63: **m = {M4}** (bubble
{acc.pipeline_bubble_fraction(8, M4, 4):.3f}).""",
                given=("8 stages", "under 10%", "v = 4"),
                rubric=((0.5, f"m = {M1} (accept 63 with 'at most 10%')"), (0.5, f"m = {M4} with v = 4")),
                wrong=("Using Megatron's (p − 1)/(vm) (relative to useful time): m = 71 and 18; −0.25 each.",),
            ),
        ),
    ),
)
