"""Answer key, Part 8 (handouts/08-expert-parallel.md, Written problems). Numbers from accounting."""

from __future__ import annotations

from reference_solutions import accounting as acc
from scripts.grading.answer_key import Problem, Section, num

# 1. Zipf(1) routing over E = 64 experts; capacity = factor x the mean load; dropped = the load above capacity.
E = 64
ZIPF = [(1 / i) / sum(1 / j for j in range(1, E + 1)) for i in range(1, E + 1)]  # shares, summing to 1


def dropped(factor: float) -> float:
    return sum(max(0.0, share - factor / E) for share in ZIPF)


DROPS = {f: dropped(f) for f in (1.0, 1.25, 2.0)}

# 4. Mixtral 8x22B experts (d = 6144, d_ff = 16384, E = 8, k = 2), 4096 tokens per rank, 8 ranks, bf16.
D, DFF, NE, K, TOK, W = 6144, 16384, 8, 2, 4096, 8
EP_BYTES = acc.moe_all_to_all_bytes(TOK, D, K, W)
TP_ONE = 2 * acc.ring_all_reduce_bytes_per_rank(2 * TOK * D, W)  # one all-reduce per pass (g forward, f backward)
TP_TWO = 2 * TP_ONE  # the handout's count: two per pass
EXPERT_BYTES = acc.expert_parameter_bytes_per_rank(D, DFF, NE, W)

SECTIONS = (
    Section(
        part=8,
        heading="Written problems",
        problems=(
            Problem(
                "1",
                "Capacity factor vs dropped tokens",
                1,
                f"""Expert i gets a share p_i ∝ 1/i of the assignments; capacity = factor × (mean load, 1/E of them);
an expert drops what exceeds it: dropped = Σ max(0, p_i − factor/E). Zipf(1), E = 64: factor 1.0 drops
**{DROPS[1.0]:.1%}**, 1.25 **{DROPS[1.25]:.1%}**, 2.0 **{DROPS[2.0]:.1%}** of assignments (the head experts
get up to {ZIPF[0] * E:.1f}× the mean). A dropped assignment loses that expert's output: with k = 2 the token keeps
its other expert (or, dropped twice, only the residual path): its MLP update is missing and its gradient does not
train that expert. A larger factor costs expert buffers of factor × T·k/E rows (memory), all-to-all bytes when
buffers are padded to capacity, and padded compute on GPUs (fixed-size batched matmuls). Dropless MoEs
(MegaBlocks) give every expert exactly its tokens, so expert batch sizes vary: block-sparse / grouped GEMM kernels
that take variable sizes.""",
                given=("E = 64", "k = 2", "exponent 1", "1.0, 1.25, 2.0"),
                rubric=(
                    (0.5, f"the three fractions (±2 points): {DROPS[1.0]:.0%}, {DROPS[1.25]:.0%}, {DROPS[2.0]:.0%}"),
                    (0.25, "what a drop loses and what a larger factor costs"),
                    (0.25, "why dropless needs variable-size kernels"),
                ),
            ),
            Problem(
                "2",
                "A straggler expert",
                1,
                """Compute: the rank holding the 3× expert does 3× the expert FLOPs, and the combine all-to-all (a
collective) cannot finish until it sends its results: every rank waits for it, so the expert phase takes ~3×
a balanced one; the all-to-all bytes also grow 3× for that rank (it receives 3× its share), and a phase lasts as
long as its most loaded rank, so the whole step takes **≈ 3×** a balanced one. The other W − 1 ranks idle for
~2/3 of it. The aux loss pushes the router toward uniform load (soft, over training,
at some cost to the main loss); the capacity factor caps the damage per step at factor × the mean (dropping the
excess). DeepSeek-V3's auxiliary-loss-free balancing adds a per-expert bias to the routing scores for the top-k
*selection* only (not the gate weights), lowered for overloaded and raised for underloaded experts after each
step: balance without an extra loss term fighting the language-model loss, and without drops.""",
                given=("3× the mean",),
                rubric=(
                    (0.25, "≈ 3× a balanced step: both phases last as long as the 3× rank"),
                    (0.25, "the others wait at the combine all-to-all, idle ~2/3 of the step"),
                    (0.25, "aux loss (soft, over training) and capacity factor (hard cap, drops excess)"),
                    (0.25, "DeepSeek-V3: a per-expert bias on the top-k selection only, adjusted each step"),
                ),
            ),
            Problem(
                "3",
                "EP and DP domains decoupled",
                1,
                """Attention, norms, embeddings and router are replicated on all 64 ranks: their gradients are
summed over all 64 and divided by 64 (each rank's loss is the mean over its tokens; the global loss the mean of
the 64). An expert lives on one rank of each EP group of 8 and has 8 replicas (one per EP group): its gradient
already sums the terms of every token of its EP group that reached it (the dispatch brought them), so it is
summed over its 8 replicas (the expert-DP group) and divided by 64 = W_ep · W_dp, as §8.3 does (router:
summed over EP then over DP, /64). The EP group can be smaller than the DP group because only the experts are
split; everything else replicates over 64. EP sits inside a node: its two all-to-alls per pass carry every
token's activations and lie on the critical path, so they need NVLink bandwidth.""",
                rubric=(
                    (0.25, "dense parameters: over all 64, divided by 64"),
                    (0.25, "experts: over their 8 replicas, divided by 64 (W_ep · W_dp)"),
                    (0.25, "why EP < DP is allowed"),
                    (0.25, "the all-to-all is on the critical path, so EP stays inside a node"),
                ),
                wrong=("Dividing expert grads by 8 (the replicas): 8× too large. 0 for the experts line.",),
            ),
            Problem(
                "4",
                "EP vs TP for Mixtral's experts",
                1,
                f"""EP 8: `moe_all_to_all_bytes(4096, 6144, 2, 8)` = **{num(EP_BYTES / 1e6)} MB** per rank per layer
per step (4 exchanges of T·k·d values, 7/8 leaving the rank). TP 8 splits every expert: the MoE block needs
an all-reduce of the T·d outputs forward (g) and of the input gradient backward (f):
2 × `ring_all_reduce_bytes_per_rank(2·4096·6144, 8)` = **{num(TP_ONE / 1e6)} MB**; counting two all-reduces per
pass as §8.4's sketch does, {num(TP_TWO / 1e6)} MB, equal to EP's at k = 2. Both hold the same expert bytes per
rank ({num(EXPERT_BYTES / 1e6)} MB of bf16 parameters: one whole expert vs 1/8 of each). So bytes do not decide at
k = 2; EP wins on compute (one large matmul per expert instead of d_ff/8 = {DFF // 8}-wide slices) and does not
grow with E, TP on balance (no straggler expert).""",
                given=("d = 6144", "d_ff = 16384", "E = 8", "k = 2", "4096 tokens per rank", "EP 8", "TP 8"),
                rubric=(
                    (0.25, f"EP {num(EP_BYTES / 1e6)} MB from the function"),
                    (0.25, f"TP {num(TP_ONE / 1e6)} or {num(TP_TWO / 1e6)} MB, with its all-reduces counted"),
                    (0.25, "the comparison: similar bytes at k = 2"),
                    (0.25, "one other difference: matmul size, load imbalance or expert memory"),
                ),  # fmt: skip
            ),
        ),
    ),
)
