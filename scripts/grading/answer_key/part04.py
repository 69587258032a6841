"""Answer key, Part 4 (handouts/04-tensor-parallel.md: §4.6 Benchmark and write-up, Written problems)."""

from __future__ import annotations

from reference_solutions import accounting as acc
from scripts.grading.answer_key import Problem, Section

# 2. Why inside a node: per layer, 4 all-reduces of s*b*h bf16 values (ring over T) against 72 b s h^2 / T FLOPs
# (24 b s h^2 forward, twice that backward; the 4 b s^2 h attention-score term left out).
H, T, F = 12288, 8, 989e12


def comm_over_compute(bandwidth: float, s: int = 2048, b: int = 1) -> float:
    comm = 4 * acc.ring_all_reduce_bytes_per_rank(2 * s * b * H, T) / bandwidth
    compute = 72 * b * s * H**2 / T / F
    return comm / compute


NVLINK, IB = comm_over_compute(450e9), comm_over_compute(50e9)
assert abs(NVLINK - 2 * (T - 1) * F / (9 * H * 450e9)) < 1e-9  # the closed form below

# 3. Memory: GPT-3 (s = 2048, h = 12288, a = 96, 96 layers) at t = 8 in 40 GiB.
S, A, L, BUDGET = 2048, 96, 96, 40 * 2**30


def largest_b(sp: bool) -> int:
    b = 0
    while L * acc.activation_memory_per_layer(S, b + 1, H, A, tp=8, sequence_parallel=sp) <= BUDGET:
        b += 1
    return b


B_TP, B_SP = largest_b(False), largest_b(True)
PER_B_TP = L * acc.activation_memory_per_layer(S, 1, H, A, tp=8) / 2**30
PER_B_SP = L * acc.activation_memory_per_layer(S, 1, H, A, tp=8, sequence_parallel=True) / 2**30

SECTIONS = (
    Section(
        part=4,
        heading="4.6 Benchmark and write-up",
        problems=(
            Problem(
                "1",
                "The table, the bytes, and requires_grad",
                3,
                """Table pasted, T = 1, 2, 4, with the student's collectives per step equal to torch's (TP: one
all-reduce forward after the row-parallel layer (g), one backward before the column-parallel one (f); SP: an
all-gather and a reduce-scatter forward, a reduce-scatter and an all-gather backward). Bytes: each all-reduce of
M bytes costs 2(T − 1)/T·M in a ring, and a step has two: 4(T − 1)/T·M; SP replaces each all-reduce by an
all-gather + reduce-scatter, each (T − 1)/T·M, four per step: the same 4(T − 1)/T·M. `requires_grad` on the
input: without it autograd never asks for ∂L/∂x, so f's backward (the all-reduce of the input gradient; under
SP the all-gather's backward reduce-scatter) never runs: one of the two collectives disappears and the bytes
halve. That is right for the first layer: nothing upstream needs the gradient of the (embedding/input) data.""",
                expect=(
                    "Reference (2-core VM, gloo, d = 512, d_ff = 2048, activation (128, 4, 512) fp32, M = 1 MiB): "
                    "parameters 8.01 / 4.01 / 2 MiB per rank and bytes sent 0 / 2 / 3 MiB at T = 1, 2, 4 for both "
                    "variants (= 4(T−1)/T·M), identical to torch's rows; 2 all_reduce (TP) or 2 all_gather + 2 "
                    "reduce_scatter (SP) per step; step-time ratio to torch 0.8-1.25.",
                    "Signs of a wrong implementation: bytes or collectives differing from torch's (f and g both "
                    "all-reducing forward; an identity backward where an all-reduce belongs), or SP bytes 2× TP's "
                    "(an all-reduce kept next to the all-gather).",
                ),
                rubric=(
                    (0.5, "the table lists every collective of their TP and SP layers"),
                    (0.5, "their bytes equal torch's (same count and sizes)"),
                    (0.5, "4(T − 1)/T·M derived for TP (2 all-reduces)"),
                    (0.5, "4(T − 1)/T·M derived for SP (2 all-gathers + 2 reduce-scatters)"),
                    (0.5, "requires_grad=False: f's backward all-reduce (the input gradient) vanishes"),
                    (0.5, "why that is fine for the first layer (nothing upstream needs the gradient)"),
                ),
            ),
            Problem(
                "2",
                "Does the step time fall like 1/T?",
                2,
                """No. Each rank's matmuls shrink by T, but the collectives do not (4(T − 1)/T·M bytes per rank
grows with T, and every call pays latency), the ranks share the machine's memory bandwidth, and on the VM's two
cores T = 4 oversubscribes (4 processes on 2 cores). At d = 512 the matmuls per rank take about as long as the
collectives, so the speedup saturates quickly: communication is of the same order as compute at this size, which
is why TP pays only for large h (compute ∝ h², communication ∝ h) and on fast links.""",
                expect=(
                    "Reference on the 2-core VM: noisy (one run: 308 / 215 / 77 ms at T = 1, 2, 4 for TP, 116 / 220 / "
                    "85 ms for SP); no clean 1/T, and rows vary 2-3× between runs on a shared machine: grade the "
                    "reasoning, not the curve.",
                    "Sign of a wrong implementation: a step time growing ~T× with T (full weights gathered on every "
                    "rank, or the whole MLP computed on each rank).",
                ),
                rubric=(
                    (0.5, "their times quoted from the benchmark"),
                    (0.25, "the answer: no (or not cleanly)"),
                    (0.25, "CPU contention / oversubscription named as a cause"),
                    (0.5, "at d = 512 the collectives cost about as much as the matmuls"),
                    (0.5, "compute grows as h², communication as h: larger models scale better"),
                ),
            ),
        ),
    ),
    Section(
        part=4,
        heading="Written problems",
        problems=(
            Problem(
                "1",
                "Conjugates as linear maps",
                1,
                """Write a replicated tensor as one value x and per-rank tensors as the stack [y₁; …; y_T]. f:
forward x ↦ [x; …; x] = (1 ⊗ I)x (copy); backward [g₁; …; g_T] ↦ Σ g_r = (1ᵀ ⊗ I) (all-reduce): the transpose.
g: forward [y₁; …; y_T] ↦ Σ y_r = (1ᵀ ⊗ I) (all-reduce); backward g ↦ g on every rank = (1 ⊗ I): the transpose.
SP: all-gather [x₁; …; x_T] (sequence shards) ↦ concat = I on the stacked shards, then copied to every rank
(1 ⊗ I); its backward sums the copies and keeps shard r (reduce-scatter) = (1ᵀ ⊗ I) then the split: the
transpose. Reduce-scatter forward (sum of partials, rank r keeps shard r) has the all-gather as transpose. With
the loss on rank 0 only, the other ranks' upstream gradients are zero, while g's identity backward assumes every
rank holds the same full gradient of the replicated output: **g's** backward (and SP's reduce-scatter→all-gather
pair, whose output is replicated the same way after the gather) would be wrong; f's all-reduce still sums
correctly.""",
                rubric=(
                    (0.5, "the four maps and transposes (copy ↔ sum, all-gather ↔ reduce-scatter)"),
                    (0.25, "g (identity backward) breaks when the loss is on rank 0 only"),
                    (
                        0.25,
                        "the reason: the other ranks' output gradients are zero, while g's identity assumes each "
                        "rank holds the full gradient",
                    ),
                ),
                wrong=(
                    "Naming f: f's all-reduce sums whatever each rank holds, so it is right. 0 of the two g lines.",
                ),
            ),
            Problem(
                "2",
                "Why inside a node",
                1,
                f"""Communication per layer: 4 ring all-reduces of 2sbh bytes: 4 · 2(T − 1)/T · 2sbh / B. Compute:
72·bsh²/T FLOPs (24bsh² forward, 48bsh² backward) at F. Ratio = 16(T − 1)F / (72hB) = **2(T − 1)F/(9hB)**,
independent of s and b. h = 12288, T = 8: NVLink (450 GB/s) **{NVLINK:.2f}**, across nodes (50 GB/s)
**{IB:.2f}**. On the critical path it adds to the layer's time: a ~{NVLINK:.0%} tax inside a node, and
{IB:.1f}× the compute across nodes, where it dominates.""",
                given=("h = 12288", "T = 8", "F = 989 TFLOP/s", "B = 450 GB/s", "B = 50 GB/s"),
                rubric=(
                    (0.5, "the formula 2(T − 1)F/(9hB) (or equivalent with the FLOP count stated)"),
                    (0.25, f"≈ {NVLINK:.2f} on NVLink and ≈ {IB:.1f} across nodes (±15%)"),
                    (0.25, "NVLink: a small tax; across nodes: communication dominates"),
                ),
                wrong=("Counting the all-reduce as M bytes (not 2(T − 1)/T·M): off by 1.75×; −0.25.",),
            ),
            Problem(
                "3",
                "Memory: the largest micro-batch",
                1,
                f"""96 layers at t = 8, b = 1: TP alone {PER_B_TP:.1f} GiB, TP + SP {PER_B_SP:.1f} GiB per sequence.
In 40 GiB: **b = {B_TP}** without SP ({"no micro-batch fits" if B_TP == 0 else ""}), **b = {B_SP}** with SP.
SP costs no extra communication: each all-reduce becomes a reduce-scatter + all-gather, which is how a ring
all-reduce is built anyway (the same 2(T − 1)/T·M bytes), so the saving is free apart from more, smaller
calls.""",
                rubric=(
                    (0.25, f"b = {B_TP} without SP (from activation_memory_per_layer)"),
                    (0.25, f"b = {B_SP} with SP"),
                    (0.5, "SP's communication: RS + AG = all-reduce's bytes: free"),
                ),
            ),
            Problem(
                "4",
                "Attention by heads",
                1,
                """Attention's heads are independent: head i needs only its own columns of Q, K and V, so a rank
holding whole heads (Q, K, V column-parallel, split by heads) computes their scores, softmax and weighted sums
locally, with no communication; the output projection, row-parallel, produces partial sums that one all-reduce
(g) finishes. T must divide the number of heads (and, with grouped-query attention, the key/value heads, or the
K/V heads are replicated), and T ≤ heads.""",
                rubric=(
                    (0.5, "heads independent: no communication inside attention until the row-parallel output"),
                    (0.5, "T divides the heads (KV heads for GQA)"),
                ),
            ),
        ),
    ),
)
