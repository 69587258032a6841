"""Answer key, Part 9 (handouts/09-context-parallel.md §9.5). Numbers from accounting."""

from __future__ import annotations

from reference_solutions import accounting as acc
from scripts.grading.answer_key import Problem, Section, nbytes, num

# 1. 70B (h = 8192, 64 query heads, 8 kv heads of 128) at s = 128k, b = 1, bf16; per rank per layer.
S, H, A, G, HD, N = 131072, 8192, 64, 8, 128, 8
SP_BYTES = 4 * acc.ring_all_reduce_bytes_per_rank(2 * S * H, N)  # AG + RS pairs = 4 all-reduces' bytes per step
CP_BYTES = acc.ring_attention_bytes_per_rank(S, 1, G, HD, N)

# 3. The overlap bound, H100 bf16 and one 400 Gb/s NIC, full heads and GQA.
C_H100 = acc.ring_attention_min_block_tokens(A, A, 989e12, 50e9)
C_GQA = acc.ring_attention_min_block_tokens(A, G, 989e12, 50e9)
C_CAUSAL = acc.ring_attention_min_block_tokens(A, A, 989e12, 50e9, causal=True)

# 4. Memory at s = 128k: Part 6's formula (no parallelism) vs ring attention over 8, and the probabilities.
PART6 = acc.activation_memory_per_layer(S, 1, H, A)
RING = acc.context_parallel_activation_memory_per_layer(S, 1, H, A, N)
PROBS = N * (S // N) ** 2 * A * 2  # every step's s/N x s/N probabilities, all heads, bf16

# 5. All-gather of K and V instead of the ring: full K, V per rank (bf16).
FULL_KV = 2 * S * G * HD * 2
BLOCK_KV = FULL_KV / N


def causal_half_tiles(rank: int, n: int, zigzag: bool) -> float:
    """Problem 2: causal attention work of CP rank ``rank`` of ``n``, in half-tiles ((s/2N)² query-key pairs).

    Rank r holds half-chunks 2r, 2r + 1 (contiguous) or r, 2N − 1 − r (zigzag); half-chunk j attends fully to the
    j half-chunks before it and to half of its own diagonal tile: j + ½ half-tiles."""
    held = (rank, 2 * n - 1 - rank) if zigzag else (2 * rank, 2 * rank + 1)
    return sum(j + 0.5 for j in held)


ZZ_N = 4  # the example: N = 4 ranks
CONTIG_TILES = [causal_half_tiles(r, ZZ_N, zigzag=False) for r in range(ZZ_N)]
ZIGZAG_TILES = [causal_half_tiles(r, ZZ_N, zigzag=True) for r in range(ZZ_N)]
FULL_TILES = 2 * 2 * ZZ_N  # non-causal: 2 half-chunks of queries x 2N half-chunks of keys
assert CONTIG_TILES == [4 * r + 2 for r in range(ZZ_N)] and set(ZIGZAG_TILES) == {2 * ZZ_N}

SECTIONS = (
    Section(
        part=9,
        heading="9.5 Written problems",
        problems=(
            Problem(
                "1",
                "CP vs SP",
                1,
                f"""SP splits only the activations outside the TP regions (layer norms, dropouts, residual) along s;
attention and the MLP still see the full sequence, gathered: per layer an all-gather + reduce-scatter around each
of attention and the MLP, forward and backward (the bytes of 4 all-reduces of s·b·h), all on the critical path.
CP splits *every* activation along s for the whole layer, including attention's inputs; it only moves K/V blocks
(and their gradients) around a ring, overlapped with the block computations. Per rank per layer, bf16: TP 8 +
SP **{nbytes(SP_BYTES)}**, CP 8 (`ring_attention_bytes_per_rank`) **{nbytes(CP_BYTES)}**
({SP_BYTES / CP_BYTES:.1f}× less, thanks to 8 KV heads of 64). Llama 3 combines them: TP + SP inside the node
splits the weights and the matmuls (which CP does not: every CP rank holds the whole layer), CP across nodes
splits the 128k sequence (attention's s² compute and the activations) with traffic that hides behind compute.""",
                given=(
                    "h = 8192",
                    "64 query heads",
                    "8 key/value heads",
                    "head_dim 128",
                    "s = 128k",
                    "b = 1",
                    "bf16",
                    "TP = 8",
                    "CP = 8",
                ),
                rubric=(
                    (0.25, "what each splits and communicates"),
                    (0.25, "SP on the critical path, CP overlapped"),
                    (0.25, f"≈ {nbytes(SP_BYTES)} against ≈ {nbytes(CP_BYTES)}"),
                    (0.25, "why combine: TP + SP splits the weights, CP the sequence"),
                ),
            ),
            Problem(
                "2",
                "Why zigzag",
                1,
                f"""Cut the sequence into 2N half-chunks; a causal (query, key) tile of half-chunks is full below the
diagonal, half on it. A half-tile is (s/2N)² query-key pairs; a chunk-sized tile (s/N)² is 4 half-tiles.
Contiguous: rank r holds half-chunks 2r and 2r + 1, which attend to 2r + ½ and 2r + 1 + ½ half-tiles: 4r + 2
half-tiles = (2r + 1)/2 chunk-sized tiles, ∝ 2r + 1 (rank 0: 1, rank N − 1: 2N − 1). Zigzag: rank r holds
half-chunks r and 2N − 1 − r: (r + ½) + (2N − 1 − r + ½) = 2N half-tiles (N/2 chunk-sized tiles) for every
rank. N = {ZZ_N}: contiguous {[num(t) for t in CONTIG_TILES]} half-tiles, zigzag {[num(t) for t in ZIGZAG_TILES]},
non-causal {FULL_TILES}. Each ring step waits for its slowest rank: contiguous (4N − 2)/(4N) = (2N − 1)/(2N) of
full non-causal attention ({max(CONTIG_TILES) / FULL_TILES:.3f} at N = {ZZ_N}: no gain from causality), zigzag
2N/(4N) = ½ of it (the causal saving, balanced).""",
                expect=(
                    "Reference benchmark (2-core VM): imbalance column ≈ 2N − 1 : 1 (max/min work) for "
                    "contiguous, 1.0 for zigzag; zigzag's causal time ≈ 0.5-0.7× of contiguous at N = 4.",
                    "Sign of a wrong implementation: zigzag no faster than contiguous (the causal skip not "
                    "applied to whole tiles), or imbalance ≠ 1 under zigzag (wrong chunk pairing).",
                ),
                rubric=(
                    (0.25, "contiguous: rank r's work ∝ 2r + 1 (4r + 2 half-tiles), derived"),
                    (0.25, "zigzag: 2N half-tiles on every rank, derived"),
                    (0.25, "step time ≈ (2N − 1)/(2N) of full attention for contiguous, ½ for zigzag"),
                    (0.25, "their benchmark's imbalance or times quoted and matching"),
                ),
            ),
            Problem(
                "3",
                "The overlap bound",
                1,
                f"""A step attends c queries to c keys per head: 4·b·a·c²·d FLOPs (QKᵀ and PV) in 4bac²d/F seconds;
the hop moves K and V, 2·b·g·c·d·e bytes in 2bgcde/W. Compute ≥ transfer ⇔ c ≥ (g/a)·e·F/(2W). H100 (989
TFLOP/s bf16), a 400 Gb/s NIC (50 GB/s): c ≥ **{num(C_H100)}** tokens per rank with a = g, **{num(C_GQA)}** with
8 KV heads of 64 (GQA). On the student's machine: F from a matmul, W from Part 1's bus bandwidth; on a CPU VM
(F ~ 50-200 GFLOP/s, W ~ 2-10 GB/s, float32 e = 4) c is a few tens of tokens, so the benchmark stops being
communication bound at small s (s = c·N). A causal zigzag block computes half a tile on average: twice the c
({num(C_CAUSAL)} on the H100).""",
                given=("your machine",),
                rubric=(
                    (0.5, "the derivation"),
                    (0.25, "their F, W and c, and the sequence length read from the benchmark"),
                    (0.25, "a causal zigzag block doubles c"),
                ),
            ),
            Problem(
                "4",
                "Memory",
                1,
                f"""Ring attention keeps for backward its own q, k, v and output shards (s/N rows), and the
log-sum-exp per query and head; the probabilities are recomputed per block in backward. Per layer at s = 128k
(70B shape, b = 1): Part 6's formula without parallelism is **{nbytes(PART6)}** (the 5as/h score term dominates:
5·64·s/h = {5 * A * S // H}); with CP 8 `context_parallel_activation_memory_per_layer` gives **{nbytes(RING)}** per
rank (34·sbh/8, no score term). Storing every step's s/N × s/N probabilities instead: N·(s/N)²·a·2 bytes =
**{nbytes(PROBS)}** per rank per layer: impossible.""",
                given=("s = 128k", "problem 1's 70B model", "b = 1", "CP = 8"),
                rubric=(
                    (0.25, "what is kept (q, k, v, o, LSE)"),
                    (0.25, "the probabilities are recomputed in backward"),
                    (0.25, f"≈ {nbytes(PART6)} against ≈ {nbytes(RING)}"),
                    (0.25, f"probabilities ≈ {nbytes(PROBS)}"),
                ),
            ),
            Problem(
                "5",
                "All-gather instead of a ring",
                1,
                f"""Bytes per rank are the same order: an all-gather of K and V sends (N − 1) blocks, as the ring's
forward does, and backward reduce-scatters their gradients as the ring's returning hops do. Peak memory: the
all-gather materialises the full K and V ({nbytes(FULL_KV)} per layer at s = 128k with 8 KV heads, bf16), the ring
only two blocks at a time ({nbytes(2 * BLOCK_KV)}). Overlap: the ring hides each hop behind a block's compute
(if c is above the bound of problem 3); the all-gather is exposed unless overlapped with other work (e.g. the
previous layer or the Q projection). The all-gather wins when K/V are small relative to Q (grouped-query
attention: g = 8 of 64 heads makes K/V 1/8 of Q's size, so gathering them is cheap and fits), and it is simpler:
arbitrary masks (document masking) and load balance with no ring schedule; Llama 3 chose it for this.""",
                rubric=(
                    (0.25, "bytes ≈ equal; memory: full K/V against two blocks"),
                    (0.25, "the ring overlaps each hop, the all-gather is exposed"),
                    (0.25, "GQA makes K/V small"),
                    (0.25, "arbitrary masks or simplicity: when the all-gather is the better choice"),
                ),
            ),
        ),
    ),
)
