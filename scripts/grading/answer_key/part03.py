"""Answer key, Part 3 (handouts/03-zero.md: §3.5 Benchmark, Written problems). Numbers from accounting."""

from __future__ import annotations

from reference_solutions import accounting as acc
from scripts.grading.answer_key import Problem, Section, num, seconds

GB = 1e9
PSI, N = 7.5e9, 64
STAGES = [acc.zero_memory_per_rank(PSI, N, k) / GB for k in range(4)]
STAGE1_N = next(n for n in range(1, 10_000) if acc.zero_memory_per_rank(PSI, n, 1) <= 32 * GB)
FLOOR2 = acc.zero_memory_per_rank(PSI, 10**9, 2) / GB  # stage 2 as N -> infinity: the fp16 parameters, 2 PSI

P70, BUDGET = 70e9, 80 * GB * (1 - 0.3)
ON8 = [acc.zero_memory_per_rank(P70, 8, k) / GB for k in range(4)]
STAGE3_N = next(n for n in range(1, 10_000) if acc.zero_memory_per_rank(P70, n, 3) <= BUDGET)

LINK = 100 * GB
DDP_BYTES = acc.ring_all_reduce_bytes_per_rank(2 * PSI, N)
Z3_BYTES = 1.5 * DDP_BYTES
TOKENS_TO_HIDE = Z3_BYTES / LINK * 0.5 * 989e12 / (6 * PSI)  # tokens/GPU whose 6ND at 50% MFU last as long


def _saving(p, g, o):
    full = acc.training_memory_bytes(1e9, param_bytes=p, grad_bytes=g, optimizer_bytes=o)
    return 1 - acc.zero_memory_per_rank(1e9, 10**9, 1, param_bytes=p, grad_bytes=g, optimizer_bytes=o) / full


FP32, MIXED = _saving(4, 4, 8), _saving(2, 2, 12)

# Problem 5 (§3.4): L blocks of 7 Linear weights, M microbatches, weights gathered in bf16, grads reduced in fp32.
BLOCKS, PER_BLOCK, MICRO, ALPHA, ACTIVATIONS = 32, 7, 8, 10e-6, 40 * GB
RING = (N - 1) / N  # the share of its buffer a rank sends in a ring all-gather or reduce-scatter
GATHERED = 2 * MICRO * RING * 2 * PSI  # forward and backward all-gathers of every microbatch, bf16
SCATTER_EVERY, SCATTER_ONCE = MICRO * RING * 4 * PSI, RING * 4 * PSI  # fp32 reduce-scatters per step
SYNC_EVERY, SYNC_ONCE = GATHERED + SCATTER_EVERY, GATHERED + SCATTER_ONCE
STATES = acc.zero_memory_per_rank(PSI, N, 3)  # 16Ψ/N
DEFERRED = STATES + 4 * PSI  # plus the unsharded fp32 grads kept until the last microbatch
PER_WEIGHT, PER_UNIT = 3 * BLOCKS * PER_BLOCK, 3 * BLOCKS  # collectives per microbatch
LATENCY = (N - 1) * ALPHA
UNIT_BYTES = 2 * PSI / BLOCKS  # one gathered block, bf16

SECTIONS = (
    Section(
        part=3,
        heading="3.5 Benchmark",
        problems=(
            Problem(
                "a",
                "Measured bytes vs the formula",
                1,
                """The benchmark's formula counts every parameter sharded exactly 1/N with 4 + 4 + 8 bytes (fp32
weights, grads, Adam m and v). Stages 1-2 land on it up to the ownership imbalance: whole parameters are owned
(greedy by size), so a rank holds P/N ± one parameter's state, and at N = 4 a model with few big matrices is
visibly uneven. FSDP sits *above* the formula by: the parameters it leaves replicated (biases and layer norms:
only the big weights are sharded; their bytes and their optimizer state exist on every rank), and the padding
(each weight padded to a multiple of N elements: at most N − 1 elements per weight, negligible here). During
forward/backward a gathered layer adds one full weight at a time (the peak, not in the after-step table).""",
                expect=(
                    "Reference on the 2-core VM (gloo, DeepMLP(4, 256, 1024), 2.17M parameters, AdamW fp32): "
                    "totals on rank 0 of 33.1 / 25.1 / 21.1 MiB (unsharded / stage 1 at N = 2 / N = 4) against the "
                    "formula's 33.1 / 24.8 / 20.7; stage 2 21.0 and 15.0 against 20.7 and 14.5 (1-4% above: whole "
                    "parameters are owned); FSDP 16.6 and 8.36 MiB against 16.6 and 8.28 (the replicated biases "
                    "and norms, ~1%), torch's fully_shard 8.28.",
                    "Signs of a wrong implementation: optimizer bytes not falling with N (state built for every "
                    "parameter), stage 2's grads equal to stage 1's (grads not set to None on non-owners), FSDP "
                    "parameter bytes equal to unsharded (full weights kept after forward).",
                ),
                rubric=(
                    (0.25, "names the replicated (unsharded) parameters"),
                    (0.25, "names the ownership/padding granularity"),
                    (0.25, "tables and both plots included"),
                    (0.25, "numbers read against the formula line"),
                ),
                wrong=("'The formula is approximate' with no source of the difference: 0 for the two 'names' lines.",),
            ),
            Problem(
                "b",
                "Why stage 2 can be faster than stage 1",
                1,
                """Stage 1 here relies on the caller: one `all_reduce` per gradient (the benchmark all-reduces
each `p.grad`), then the optimizer's all-gather of updated parameters. Stage 2 replaces the per-parameter
all-reduces with a few bucketed `reduce_scatter_tensor` calls (one per bucket of owners' slots), then the same
all-gather. The bytes are the same (reduce-scatter + all-gather = a ring all-reduce), but stage 2 launches far
fewer collectives, so it pays α far fewer times, and each rank updates only its own gradients.""",
                expect=(
                    "Reference on the 2-core VM: at N = 2 and 4 stage 2 takes about half of stage 1's step (76 vs "
                    "146 ms, 140 vs 277 ms; 0.5-0.8× of ZeroRedundancyOptimizer), stage 1 1.0-1.5× of it. FSDP "
                    "1.3-2× torch's fully_shard on CPU (gloo, no prefetch stream): not graded.",
                    "Sign of a wrong implementation: stage 2 slower than stage 1 (one reduce-scatter per "
                    "parameter, or a full all-reduce followed by discarding).",
                ),
                rubric=(
                    (0.5, "counts the collectives: per-parameter all-reduce vs few reduce-scatters"),
                    (0.5, "same bytes, fewer launches (latency α) as the reason"),
                ),
                wrong=("'Stage 2 sends fewer bytes': wrong, the bytes are equal. 0 of 0.5.",),
            ),
        ),
    ),
    Section(
        part=3,
        heading="Written problems",
        problems=(
            Problem(
                "1",
                "The stage table for 7.5B on 64 GPUs",
                1,
                f"""`zero_memory_per_rank(7.5e9, 64, k)` for k = 0..3: **{", ".join(f"{x:.1f}" for x in STAGES)} GB**
(16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N). Stage 1 fits 32 GB once 4Ψ + 12Ψ/N ≤ 32e9, i.e. 90e9/N ≤ 2e9:
**N ≥ {STAGE1_N}**. Stage 2 keeps every fp16 parameter on every rank (only optimizer state and gradients are
sharded), so it never drops below 2Ψ = **{FLOOR2:.0f} GB** however large N.""",
                given=("Ψ = 7.5e9", "N = 64", "32 GB"),
                rubric=(
                    (0.5, f"the four numbers (±0.1 GB): {', '.join(f'{x:.1f}' for x in STAGES)}"),
                    (0.25, f"N = {STAGE1_N} (or 'N ≥ 45') with the inequality"),
                    (0.25, "2Ψ floor: parameters are replicated in stage 2"),
                ),
                wrong=(f"N = 47 or 48 from rounding 31.4 GB: −0.25 if the inequality is not shown ({STAGE1_N}).",),
            ),
            Problem(
                "2",
                "70B on 8 × 80 GB",
                1,
                f"""56 GB per GPU for model states (30% reserved). Stages 0-3 need
**{", ".join(f"{x:.0f}" for x in ON8)} GB** per GPU on 8 GPUs: **none fits**. Stage 3 needs 16 · 70e9 / N ≤ 56e9:
**N ≥ {STAGE3_N} GPUs** (in practice 24 or 32: three or four nodes).""",
                given=("70B", "8 × 80 GB", "30%"),
                rubric=(
                    (0.25, f"the four per-GPU numbers ({', '.join(f'{x:.0f}' for x in ON8)} GB)"),
                    (0.25, "'none fits'"),
                    (0.5, f"stage 3 needs {STAGE3_N} GPUs"),
                ),
                wrong=("Using all 80 GB (forgetting the 30% reserve): N = 14 for stage 3; −0.5.",),
            ),
            Problem(
                "3",
                "Stage 3's communication",
                1,
                f"""DDP: `ring_all_reduce_bytes_per_rank(2 · 7.5e9, 64)` = **{num(DDP_BYTES / GB)} GB** per GPU, at
100 GB/s **{seconds(DDP_BYTES / LINK)}**. Stage 3: 1.5× = **{num(Z3_BYTES / GB)} GB**,
**{seconds(Z3_BYTES / LINK)}** (an all-gather in forward, one in backward, a reduce-scatter: 3 × (N − 1)/N ·
2Ψ). The extra {seconds((Z3_BYTES - DDP_BYTES) / LINK)} hides only if the step's compute lasts at least as long
as all of stage 3's traffic, **≥ {seconds(Z3_BYTES / LINK)}** of compute per step (the gathers are prefetched
behind the previous layer); e.g. at 989 TFLOP/s and 50% MFU that is 6·Ψ·tokens ≥ that time:
≈ {num(TOKENS_TO_HIDE)} tokens per GPU per step.""",
                given=("100 GB/s", "7.5e9 bf16 parameters", "N = 64", "989 TFLOP/s", "50% MFU"),
                rubric=(
                    (0.25, f"DDP: {num(DDP_BYTES / GB)} GB / {seconds(DDP_BYTES / LINK)} (±5%)"),
                    (0.25, f"stage 3: {num(Z3_BYTES / GB)} GB / {seconds(Z3_BYTES / LINK)} (±5%)"),
                    (
                        0.25,
                        f"compute per step ≥ all of stage 3's traffic, {seconds(Z3_BYTES / LINK)} (not only the extra)",
                    ),
                    (0.25, f"≈ {num(TOKENS_TO_HIDE)} tokens per GPU per step (±10%)"),
                ),  # fmt: skip
                wrong=("Using 4-byte gradients: doubles everything; −0.25.",),
            ),
            Problem(
                "4",
                "Stage 1 saving: fp32 vs mixed precision",
                1,
                f"""Stage 1 shards the optimizer state only. Pure fp32 Adam: 8 of 16 bytes per parameter are
optimizer state, so as N → ∞ it saves **{FP32:.0%}**. Mixed precision: the optimizer state is 12 of 16 bytes
(fp32 master weights + m + v), so it saves **{MIXED:.0%}**. The difference: mixed precision moves the fp32
master copy of the weights into the optimizer state, which stage 1 shards; in pure fp32 the weights
themselves are the master copy and stay replicated.""",
                given=("4 + 4 + 8 bytes",),
                rubric=(
                    (0.25, f"pure fp32: {FP32:.0%}"),
                    (0.25, f"mixed precision: {MIXED:.0%}"),
                    (0.5, "the master weights live in the optimizer state under mixed precision"),
                ),
                wrong=("Comparing absolute bytes instead of fractions: both fraction lines if the fractions follow.",),
            ),
            Problem(
                "5",
                "Units and deferred sync, in numbers",
                1,
                f"""(a) All-gathers are the same either way: forward and backward of every microbatch,
2 · M · (N − 1)/N · 2Ψ = **{num(GATHERED / GB)} GB** per GPU per step. Reduce-scatters of fp32 grads,
(N − 1)/N · 4Ψ = {num(SCATTER_ONCE / GB)} GB each: every microbatch **{num(SCATTER_EVERY / GB)} GB**, only the last
**{num(SCATTER_ONCE / GB)} GB**. Totals {num(SYNC_EVERY / GB)} GB (**{seconds(SYNC_EVERY / LINK)}**) against
{num(SYNC_ONCE / GB)} GB (**{seconds(SYNC_ONCE / LINK)}**) at 100 GB/s: deferring saves
{seconds((SYNC_EVERY - SYNC_ONCE) / LINK)} per step. (b) Deferring keeps the unsharded fp32 grads, 4Ψ =
**{num(4 * PSI / GB)} GB** per GPU, from the first microbatch's backward to the last's, next to stage 3's
16Ψ/N = {num(STATES / GB)} GB of model states: {num(DEFERRED / GB)} GB instead of {num(STATES / GB)}. With
40 GB of activations both fit in 80 GB ({num((DEFERRED + ACTIVATIONS) / GB)} and
{num((STATES + ACTIVATIONS) / GB)} GB), the deferred one with little room (bf16 accumulation would halve the
30 GB). (c) One collective each way per weight: 3 · 32 · 7 = **{PER_WEIGHT}** per microbatch; per block
**{PER_UNIT}**. At (N − 1)α = {LATENCY * 1e3:.2f} ms each, per step (8 microbatches)
**{seconds(MICRO * PER_WEIGHT * LATENCY)}** against **{seconds(MICRO * PER_UNIT * LATENCY)}** of latency alone;
a gathered unit takes 2Ψ/L = **{num(UNIT_BYTES / GB)} GB** (two with one prefetched).""",
                given=(
                    "Ψ = 7.5e9",
                    "L = 32",
                    "7 Linear weights",
                    "N = 64",
                    "100 GB/s",
                    "M = 8",
                    "α = 10 μs",
                    "40 GB of activations",
                    "80 GB",
                ),  # fmt: skip
                rubric=(
                    (
                        0.25,
                        f"(a) {num(SYNC_EVERY / GB)} vs {num(SYNC_ONCE / GB)} GB per step, "
                        f"{seconds(SYNC_EVERY / LINK)} vs {seconds(SYNC_ONCE / LINK)} (±5%)",
                    ),
                    (
                        0.25,
                        f"(b) 4Ψ = {num(4 * PSI / GB)} GB of unsharded grads held until the last microbatch; "
                        "both fit, the deferred one narrowly",
                    ),
                    (
                        0.25,
                        f"(c) {PER_WEIGHT} vs {PER_UNIT} collectives per microbatch, "
                        f"{seconds(MICRO * PER_WEIGHT * LATENCY)} vs {seconds(MICRO * PER_UNIT * LATENCY)} per step",
                    ),
                    (0.25, f"(c) a unit gathers {num(UNIT_BYTES / GB)} GB at once (the price of fewer messages)"),
                ),  # fmt: skip
                wrong=(
                    "All-gathers counted once per step instead of per microbatch: (a) line 0.",
                    "Deferred memory given as 4Ψ/N (sharded): (b) line 0, the point of the problem.",
                ),
            ),
        ),
    ),
)
