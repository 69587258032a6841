"""Answer key, Part 11 (handouts/11-capstone.md §11.5). Numbers from accounting."""

from __future__ import annotations

from reference_solutions import accounting as acc
from scripts.grading.answer_key import Problem, Section, nbytes, num

# 1. Llama 3 405B (Grattafiori et al. 2024, Table 3 and §3.3).
L405, H405, A405, G405, HD405, F405, V405 = 126, 16384, 128, 8, 128, 53248, 128256
P405 = acc.transformer_num_params(V405, H405, L405, A405, G405, F405)
MEM_8K = acc.parallel_memory_per_rank(P405, L405, H405, A405, 8192, 1, dp=128, tp=8, pp=16, zero_stage=2,
                                      num_microbatches=16)  # fmt: skip
# 128k with CP 16: each rank holds 8192 tokens; ZeRO over dp = 8 only (as parallelize shards), then over dp·cp.
MEM_128K = acc.parallel_memory_per_rank(P405, L405, H405, A405, 131072 // 16, 1, dp=8, tp=8, pp=16, zero_stage=2,
                                        num_microbatches=16)  # fmt: skip
MEM_128K_DPCP = acc.parallel_memory_per_rank(P405, L405, H405, A405, 131072 // 16, 1, dp=128, tp=8, pp=16,
                                             zero_stage=2, num_microbatches=16)  # fmt: skip
MEM_128K_NO_CP = acc.parallel_memory_per_rank(P405, L405, H405, A405, 131072, 1, dp=128, tp=8, pp=16, zero_stage=2,
                                              num_microbatches=1)  # fmt: skip
MEM_TP16 = acc.parallel_memory_per_rank(P405, L405, H405, A405, 8192, 1, dp=64, tp=16, pp=16, zero_stage=2,
                                        num_microbatches=32)  # fmt: skip
BYTES_8K = acc.capstone_bytes_per_rank(P405, L405, H405, A405, HD405, 8192, 1, dp=128, pp=16, cp=1, tp=8,
                                       num_microbatches=16)  # fmt: skip
BYTES_128K = acc.capstone_bytes_per_rank(P405, L405, H405, A405, HD405, 131072, 1, dp=8, pp=16, cp=16, tp=8,
                                         num_microbatches=16)  # fmt: skip
BUBBLE_16 = acc.pipeline_bubble_fraction(16, 16)
BUBBLE_M1 = acc.pipeline_bubble_fraction(16, 1)  # PP 16 with one microbatch per replica (128k without CP)
# Part 7's planner extended to CP (plan_capstone), on the same cluster; the layouts it picks.
CLUSTER_405 = dict(gpus_per_node=8, num_nodes=2048, gpu_memory_bytes=80e9, kv_heads=G405)
PLAN_8K = acc.plan_capstone(P405, L405, H405, A405, 8192, 2048, **CLUSTER_405)
PLAN_128K = acc.plan_capstone(P405, L405, H405, A405, 131072, 128, **CLUSTER_405)


def layout(plan: dict) -> str:
    """'TP 8 × CP 16 × PP 16 × DP 8, ZeRO-2' (CP only when > 1)."""
    axes = [f"{a.upper()} {plan[a]}" for a in ("tp", "cp", "pp", "dp") if a != "cp" or plan[a] > 1]
    return " × ".join(axes) + f", ZeRO-{plan['zero_stage']}"


# 3. The ring with the repeated heads (H/T = 16 per rank) against the KV heads only (K/T = 1 per rank).
RING_REPEATED = acc.ring_attention_bytes_per_rank(131072, 1, A405 // 8, HD405, 16)
RING_KV = acc.ring_attention_bytes_per_rank(131072, 1, G405 // 8, HD405, 16)

SECTIONS = (
    Section(
        part=11,
        heading="11.5 Written problems",
        problems=(
            Problem(
                "1",
                "Reproduce Llama 3 405B's layout",
                2,
                f"""(a) `transformer_num_params` gives **{num(P405 / 1e9, 4)} B** parameters (the published 405 B).
(b) TP 8 × PP 16 × DP 128 at 8k (m = 2048/128 = 16 microbatches): memory **{nbytes(MEM_8K)}** per rank (fits
80 GB, just); bytes per step and rank: tp **{nbytes(BYTES_8K["tp"])}**, pp **{nbytes(BYTES_8K["pp"])}**, dp
**{nbytes(BYTES_8K["dp"])}**; 1F1B bubble (p − 1)/(m + p − 1) = **{BUBBLE_16:.3f}** (Llama 3 interleaves stages to
cut it). TP 8 × CP 16 × PP 16 × DP 8 at 128k (128/8 = 16 microbatches): with ZeRO-2 over dp = 8 only
**{nbytes(MEM_128K)}** — over 80 GB; sharding the optimizer over dp·cp = 128 (what Megatron and Llama 3 do: the cp
ranks are data-parallel for the weights) brings it to **{nbytes(MEM_128K_DPCP)}**. Bytes: tp
**{nbytes(BYTES_128K["tp"])}**, cp **{nbytes(BYTES_128K["cp"])}** (ring + gradient all-reduce), pp
**{nbytes(BYTES_128K["pp"])}**, dp **{nbytes(BYTES_128K["dp"])}**.
(c) `plan_capstone` finds both: **{layout(PLAN_8K)}** at 8k and **{layout(PLAN_128K)}** at 128k
({nbytes(PLAN_128K["memory_per_rank"])}, ZeRO over dp·cp). TP stops at 8: its {nbytes(BYTES_8K["tp"])} per step
must ride NVLink inside a node of 8 (at 50 GB/s between nodes it alone would take
{BYTES_8K["tp"] / 50e9:.1f} s per step); TP 16 would even halve the memory ({nbytes(MEM_TP16)}), so memory is not
what stops it. PP rather than more DP: the model states of 405 B (16 B/param ≈ 6.5 TB) must be split 128 ways
before any data parallelism helps, and PP's traffic ({nbytes(BYTES_8K["pp"])}) is the smallest of all axes, so
it goes across nodes. CP only at 128k: at 8k the planner fits with cp = 1. At 128k the batch rules out cp < 16,
not memory: 128 sequences, and a pipeline of 16 stages needs 16 microbatches per replica (the planner's "fewer
microbatches than stages"), so dp ≤ 8 and cp = 16384 / (8 · 16 · 8) = 16. CP 1 at PP 16 × DP 128 with one
microbatch would fit ({nbytes(MEM_128K_NO_CP)}: the first stage holds one microbatch of 131072 tokens, the bytes
of 16 of 8192) but its 1F1B bubble would be {BUBBLE_M1:.3f}.""",
                given=(
                    "126 layers",
                    "d = 16384",
                    "128 query heads of 128",
                    "8 KV heads",
                    "d_ff = 53248",
                    "vocabulary 128256",
                    "80 GB",
                    "2048 sequences of 8192",
                    "128 sequences of 131072",
                    "microbatch 1",
                    "ZeRO-2",
                    "TP 8 × PP 16 × DP 128",
                    "CP 16 × PP 16 × DP 8",
                ),
                rubric=(
                    (0.25, f"parameter count ≈ {num(P405 / 1e9, 4)} B"),
                    (0.25, f"8k memory ≈ {nbytes(MEM_8K)} (±5%)"),
                    (0.25, "8k bytes per axis from capstone_bytes_per_rank"),
                    (0.25, f"bubble {BUBBLE_16:.3f}"),
                    (0.25, f"128k memory over 80 GB with ZeRO over dp only ({nbytes(MEM_128K)})"),
                    (0.25, "the fix: shard the optimizer over dp·cp (or more ZeRO)"),
                    (0.25, "TP inside the node, justified by its bytes"),
                    (0.25, "CP at 128k: the batch (16 microbatches per replica leave dp ≤ 8), not memory alone"),
                ),
                wrong=(
                    "-0.25: memory computed with the full 131072 tokens per rank under CP (CP splits the "
                    "sequence: seq/cp per rank).",
                    "0 for the CP line: 'one 131072-token sequence does not fit without CP'. At PP 16 with one "
                    "microbatch per replica it does; what CP 16 buys is a pipeline with 16 microbatches.",
                ),  # fmt: skip
            ),
            Problem(
                "2",
                "Your run",
                1,
                """The curves coincide: every rank computes exactly the dense model's functions on its part of the
batch and tokens, and the gradient rules (sum over tp of the sequence-parallel replicas, mean over dp, ep, cp)
make each AdamW step the dense step on the whole batch. Not bit for bit: float32 sums are not associative, and
the parallel run adds in another order (ring all-reduces, the partial sums of row-parallel layers, the online
softmax of ring attention); differences start near 1e-7 and may grow slowly through training, but never by
more than the run-to-run noise of a reordering.""",
                given=(),
                expect=(
                    "Reference on the course VM (2-core CPU, gloo): dp2,tp2,pp2, 200 steps of 16 x 64 tokens: "
                    "loss 3.81 -> ~0.74 for both runs, largest |difference| over the run ~1e-5 to 1e-4 "
                    "(float32), ~3 min for the 8 processes.",
                    "Sign of a wrong implementation: the curves separate from step 1 (a gradient rule or a "
                    "layout wrong), or agree in loss but the sample is gibberish (state not reassembled).",
                ),
                rubric=(
                    (0.25, "both plots and samples included"),
                    (0.25, "why equal: same functions, gradient rules make the step the dense one"),
                    (0.25, "why not bitwise: float32 summation order"),
                    (0.25, "the size of the difference quoted from their run"),
                ),
            ),
            Problem(
                "3",
                "GQA on the ring",
                1,
                f"""Per layer and microbatch (one sequence of 131072 tokens through the layer, forward and
backward) each rank sends `ring_attention_bytes_per_rank(131072, 1, heads, 128, 16)` bytes: with the 16
repeated heads (128/8) **{nbytes(RING_REPEATED)}**, with only its 8/8 = 1 KV head **{nbytes(RING_KV)}**: 16× less
(the group size a/g).
A step of the 128k layout runs 16 microbatches per replica, so per step both are 16 times more (accept either,
stated per microbatch or per step). Repeating after the ring is exact (the repeat is a copy);
in backward the gradients of the repeated heads must be summed back into each KV head *before* they travel
(the adjoint of the repeat), so the gradient hops shrink the same way.""",
                given=("8 KV heads", "128 query heads", "TP 8", "CP 16", "seq 131072", "microbatch 1"),
                rubric=(
                    (0.25, f"repeated: ≈ {nbytes(RING_REPEATED)} per microbatch (16× that per step)"),
                    (0.25, f"KV heads only: ≈ {nbytes(RING_KV)} per microbatch (16× that per step)"),
                    (0.25, "16× = the query heads per KV head"),
                    (0.25, "backward: sum the repeated heads' gradients before the hop"),
                ),
            ),
            Problem(
                "4",
                "The bill of a step",
                1,
                """Per block and microbatch: over tp 2 all-gathers + 2 reduce-scatters forward and the same in
backward; over cp N-1 key/value hops forward, N-1 + N hops (blocks and gradients) backward, to ring
neighbours only; over pp one activation and one gradient per microbatch between neighbouring stages (here pp =
1: none); over dp and cp one flat all-reduce of the gradients per step (plus tp's all-reduce of the
sequence-parallel replicas' gradients). The counts match capstone_bytes_per_rank's terms. Slowest links: dp
(one all-reduce per step, overlappable, the least latency-bound) — then pp; never tp (several collectives per
layer on the critical path).""",
                given=(),
                rubric=(
                    (0.25, "tp: 4 collectives per block per pass"),
                    (0.25, "cp: ring neighbour hops, counted"),
                    (0.25, "compared with capstone_bytes_per_rank"),
                    (0.25, "dp (or pp) on the slowest links, with a reason"),
                ),
            ),
        ),
    ),
)
