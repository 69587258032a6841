"""Answer key, Part 7 (handouts/07-mesh.md, Written questions). Numbers from accounting."""

from __future__ import annotations

from reference_solutions import accounting as acc
from scripts.grading.answer_key import Problem, Section, num

GB = 1e9

# 1. Llama 3 405B with TP 16 over two nodes (PP 16, DP 64 on 16,384 GPUs; 2048 sequences -> m = 32).
L405 = dict(num_params=405e9, num_layers=126, d_model=16384, seq=8192, microbatch=1)
TP16 = acc.communication_bytes_per_rank(**L405, dp=64, tp=16, pp=16, zero_stage=1, num_microbatches=2048 // 64)
TP8 = acc.communication_bytes_per_rank(**L405, dp=128, tp=8, pp=16, zero_stage=1, num_microbatches=2048 // 128)
TP16_S = TP16["tp"] / (50 * GB)

# 2. 70B (80 layers, h = 8192, s = 4096) on 4 nodes of 8: TP 8 + PP 4 vs TP 8 + FSDP over 4 (ZeRO-3 on dp).
L70 = dict(num_params=70e9, num_layers=80, d_model=8192, seq=4096, microbatch=1)


def across(m: int) -> tuple[float, float, float]:
    """(PP's bytes across nodes, FSDP's, PP's bubble) per GPU per step with m microbatches in the step."""
    pp = acc.communication_bytes_per_rank(**L70, dp=1, tp=8, pp=4, zero_stage=0, num_microbatches=m)["pp"]
    fsdp = acc.communication_bytes_per_rank(**L70, dp=4, tp=8, pp=1, zero_stage=3, num_microbatches=m // 4)["dp"]
    return pp, fsdp, acc.pipeline_bubble_fraction(4, m)


def step_s(m: int, link: float = 50 * GB) -> tuple[float, float]:
    """Modelled step seconds (PP, FSDP): 32 GPUs at 50% of 989 TFLOP/s; PP pays its bubble and its (unhidden)
    sends, FSDP's prefetched traffic hides behind compute up to the compute's length."""
    pp, fsdp, bubble = across(m)
    compute = acc.training_flops(70e9, m * 4096) / (32 * 989e12 * 0.5)
    return compute / (1 - bubble) + pp / link, max(compute, fsdp / link)


SMALL, LARGE = across(4), across(64)
T_SMALL, T_LARGE = step_s(4), step_s(64)

# 3. HSDP vs FSDP, 7B on 64 nodes of 8 (bf16 grads; FSDP over 512, HSDP: shard in the node, replicate across).
P7 = 7e9
FSDP_X = 1.5 * acc.ring_all_reduce_bytes_per_rank(2 * P7, 512)
HSDP_X = acc.ring_all_reduce_bytes_per_rank(2 * P7 / 8, 64)
MEM_FSDP, MEM_HSDP = acc.zero_memory_per_rank(P7, 512, 3) / GB, acc.zero_memory_per_rank(P7, 8, 3) / GB

SECTIONS = (
    Section(
        part=7,
        heading="Written questions",
        problems=(
            Problem(
                "1",
                "Why not TP across nodes",
                1,
                f"""TP 16 (two nodes) × PP 16 × DP 64, m = 2048/64 = 32: `communication_bytes_per_rank` gives
tp = **{num(TP16["tp"] / GB)} GB** per GPU per step (pp {num(TP16["pp"] / GB)}, dp {num(TP16["dp"] / GB)} GB). A
ring over 16 GPUs in two nodes runs at its slowest link, 50 GB/s: **{TP16_S:.1f} s**, i.e. {TP16_S / 10:.0%} of
the 10 s of compute, added to it (TP's all-reduces sit on the critical path): a step of ≈ {10 + TP16_S:.0f} s,
TP traffic {TP16_S / (10 + TP16_S):.0%} of it. Inside a node (TP 8, {num(TP8["tp"] / GB)} GB) at 450 GB/s it
is {TP8["tp"] / 450e9:.2f} s.""",
                given=(
                    "405B",
                    "126 layers",
                    "h = 16384",
                    "s = 8192",
                    "microbatch 1",
                    "ZeRO-1",
                    "TP 16",
                    "PP 16",
                    "DP 64",
                    "m = 32",
                    "50 GB/s",
                    "10 s of compute",
                ),
                rubric=(
                    (0.25, f"≈ {num(TP16['tp'] / GB, 2)} GB of TP traffic per GPU per step"),
                    (0.25, f"≈ {TP16_S:.0f} s at 50 GB/s"),
                    (0.25, f"the fraction: traffic / (compute + traffic) ≈ {TP16_S / (10 + TP16_S):.0%}"),
                    (0.25, "why it cannot hide: TP's all-reduces are on the critical path"),
                ),  # fmt: skip
            ),
            Problem(
                "2",
                "Pipeline vs FSDP across nodes",
                1,
                f"""Across nodes, PP sends a middle stage's activation forward and gradient back per microbatch
(2·A·m, A = 2sbh), FSDP moves 1.5× a ring all-reduce of its 2P/tp gradient bytes over 4 (independent of m).
m = 4: PP **{num(SMALL[0] / GB)} GB**, FSDP **{num(SMALL[1] / GB)} GB**, PP's bubble {SMALL[2]:.0%}: PP sends
far less but idles {SMALL[2]:.0%} of the step. m = 64: PP {num(LARGE[0] / GB)} GB, FSDP {num(LARGE[1] / GB)} GB,
bubble {LARGE[2]:.1%}. PP always sends far fewer bytes; the question is time. A model (32 GPUs at 50% of 989
TFLOP/s, 50 GB/s across nodes; PP pays its bubble, FSDP's prefetched gathers hide behind compute when they fit):
m = 4: PP **{T_SMALL[0]:.2f} s**, FSDP **{T_SMALL[1]:.2f} s** (FSDP's {num(SMALL[1] / GB)} GB cannot hide behind
so little compute, PP idles {SMALL[2]:.0%}: about even, PP ahead on any slower network); m = 64: PP
**{T_LARGE[0]:.2f} s**, FSDP **{T_LARGE[1]:.2f} s** (FSDP's traffic is hidden, PP still pays {LARGE[2]:.1%}). So
PP wins when the network is slow relative to a small step (small batch, slow links), FSDP when the step's compute
is long enough to hide its traffic (large batch). The conventional "PP across nodes" holds when bandwidth,
not the bubble, is the bottleneck.""",
                given=(
                    "70B",
                    "80 layers",
                    "h = 8192",
                    "s = 4096",
                    "microbatch 1",
                    "4 nodes of 8",
                    "m = 4",
                    "m = 64",
                    "989 TFLOP/s",
                    "50% MFU",
                    "50 GB/s",
                ),
                rubric=(
                    (0.25, "both byte counts for m = 4 and 64 (from the function, ±10%)"),
                    (0.25, "the two bubbles"),
                    (
                        0.25,
                        "m = 4: a verdict with a time estimate (either verdict) weighing the bubble and the traffic",
                    ),
                    (0.25, "m = 64: FSDP (its traffic hides), or 'both fine, the bubble costs PP'"),
                ),
            ),
            Problem(
                "3",
                "HSDP vs FSDP on 64 × 8",
                1,
                f"""FSDP over all 512 GPUs: each GPU's collectives span nodes: 1.5 × 2(N − 1)/N × 2Ψ =
**{num(FSDP_X / GB)} GB** per step. HSDP (FSDP inside the node, replicas across nodes): only the all-reduce of
the GPU's 1/8 gradient shard over the 64 replicas crosses nodes: 2·63/64·(2Ψ/8) = **{num(HSDP_X / GB)} GB**
({FSDP_X / HSDP_X:.0f}× less). It pays in memory: model states sharded 8 ways instead of 512,
**{MEM_HSDP:.1f} GB** per GPU instead of **{MEM_FSDP:.2f} GB** (16Ψ/8 vs 16Ψ/512).""",
                given=("64 nodes of 8", "7B", "bf16 gradients"),
                rubric=(
                    (0.5, f"≈ {num(FSDP_X / GB)} GB vs ≈ {num(HSDP_X / GB)} GB across nodes"),
                    (0.5, f"memory {MEM_HSDP:.0f} GB vs {MEM_FSDP:.2f} GB per GPU"),
                ),
            ),
            Problem(
                "4",
                "Layer norms and p2p neighbours in MeshTrainer",
                1,
                """The layer norm sits outside the TP region: its input is the full, replicated activation (after
g's all-reduce) and its output's gradient is identical on every tp rank (f's backward all-reduce made it so),
so every tp rank computes the *same* gradient: nothing to reduce (an all-reduce would multiply it by T, or
average identical values). (With sequence parallelism each rank would see only its sequence shard, and the norm
grads would need a sum over tp.) Pipeline neighbours in the row-major mesh are the ranks with the same (dp, tp)
coordinates and pp ± 1, i.e. rank ± tp (the tp size), not rank ± 1; rank ± 1 is a tp peer: activations would go
to a rank of the same stage, shapes and schedules would not match, and the step would hang or compute garbage.""",
                rubric=(
                    (0.5, "identical grads on tp ranks: replicated input and replicated output gradient"),
                    (0.25, "p2p neighbours are ± the tp size apart (same dp and tp coordinates)"),
                    (0.25, "rank ± 1 is a tp peer: a hang or wrong activations"),
                ),
            ),
            Problem(
                "5",
                "The 3D benchmark",
                1,
                """Read from the student's `scripts.bench.mesh` table: bytes per axis against the formulas (they
must match) and the step times of DP 8, DP 2 × TP 4, DP 2 × PP 4, DP 2 × PP 2 × TP 2. TP's bytes dominate
(4 all-reduces of a microbatch's activations per block and microbatch, against one gradient all-reduce for
DP and two activations per microbatch for PP). On the CPU the step time does not follow the bytes closely: gloo
over shared memory is latency-bound (many small messages cost more than their bytes), 8 processes share 2
cores, and PP adds a bubble; so configurations with more, smaller messages (TP, PP with many microbatches) are
slower than their bytes suggest.""",
                expect=(
                    "Reference on the 2-core VM: measured bytes equal to the formulas on every axis; DP 8 "
                    "fastest or close, configurations with TP the slowest; a spread of 1.5-4× between them.",
                    "Sign of a wrong implementation: an axis's measured bytes differing from its formula (traffic on "
                    "the wrong group: e.g. dp bytes on the tp axis), or a 3D step much slower than every other.",
                ),
                rubric=(
                    (0.25, "the dominant axis, read from their table"),
                    (0.25, "the reason (4 all-reduces per block)"),
                    (0.25, "whether the measured time follows"),
                    (0.25, "a reason (latency, shared cores, bubble)"),
                ),
            ),
        ),
    ),
)
