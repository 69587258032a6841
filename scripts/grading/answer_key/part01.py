"""Answer key, Part 1 (handouts/01-collectives.md §1.8). Numbers from reference_solutions.accounting."""

from __future__ import annotations

from reference_solutions import accounting as acc
from scripts.grading.answer_key import Problem, Section, nbytes, num, seconds

# 1. Tree vs ring: N = 8, alpha = 5 us, 1/beta = 10 GB/s. A reduce-then-broadcast over a binomial tree is
# 2 ceil(log2 N) (alpha + M beta): for N = 8 (a power of two) twice recursive doubling's log2 N (alpha + M beta).
N, ALPHA, BETA = 8, 5e-6, 1 / 10e9
RING_MSGS, RING_SHARE = 2 * (N - 1), 2 * (N - 1) / N
TREE_STEPS = 2 * (N - 1).bit_length()  # 2 ceil(log2 N)
TREE_CROSS = (RING_MSGS - TREE_STEPS) * ALPHA / ((TREE_STEPS - RING_SHARE) * BETA)
assert abs(acc.all_reduce_time(TREE_CROSS, N, "ring", ALPHA, BETA)
           - 2 * acc.all_reduce_time(TREE_CROSS, N, "recursive_doubling", ALPHA, BETA)) < 1e-12  # fmt: skip

# 4. All-to-all volume: T tokens of H bf16 values per rank, uniform over N experts (one exchange = a quarter
# of the step's four in moe_all_to_all_bytes, top-1).
T, H, N4 = 4096, 4096, 8
A2A = acc.moe_all_to_all_bytes(T, H, 1, N4) / 4
AR = acc.ring_all_reduce_bytes_per_rank(2 * T * H, N4)

# 6. Where is the crossover: NVLink node vs 8 nodes on 25 Gb/s Ethernet, N = 8.
NVLINK = acc.all_reduce_crossover_bytes(8, 5e-6, 1 / 150e9)
ETHER = acc.all_reduce_crossover_bytes(8, 30e-6, 1 / 3e9)
BUCKET, ACT = 25 * 2**20, 64 * 2**10
RING_LAT_1024 = acc.all_reduce_time(0, 1024, "ring", 30e-6, 0)
RING_BW_1024 = acc.all_reduce_time(BUCKET, 1024, "ring", 0, 1 / 3e9)


def _pick(cross):
    return lambda m: "the ring" if m > cross else "recursive doubling"


nv, eth = _pick(NVLINK), _pick(ETHER)

SECTIONS = (
    Section(
        part=1,
        heading="1.8 Written problems",
        problems=(
            Problem(
                "1",
                "Tree vs ring",
                1,
                f"""With N = {N}: ring = {RING_MSGS}α + {RING_SHARE:g}·Mβ, tree = {TREE_STEPS}(α + Mβ) =
{TREE_STEPS}α + {TREE_STEPS}·Mβ. Equal at ({RING_MSGS} − {TREE_STEPS})α = ({TREE_STEPS} − {RING_SHARE:g})·Mβ, so
M* = {RING_MSGS - TREE_STEPS}α / ({TREE_STEPS - RING_SHARE:g}β) = **{num(TREE_CROSS)} bytes ≈ {nbytes(TREE_CROSS)}**
(≈ {TREE_CROSS / 1e3:.0f} kB). Below it the tree wins (fewer messages, latency-bound); above it the ring wins
(it sends {RING_SHARE:g}·M per rank instead of {TREE_STEPS}·M). At M*, both take
{seconds(acc.all_reduce_time(TREE_CROSS, N, "ring", ALPHA, BETA))}. The plot: two straight lines on linear
axes (on log-log, two curves that flatten to α-terms of {seconds(RING_MSGS * ALPHA)} and
{seconds(TREE_STEPS * ALPHA)} at small M), crossing at M*.""",
                given=("α = 5 µs", "1/β = 10 GB/s", "N = 8"),
                rubric=(
                    (0.25, "both costs written for N = 8"),
                    (0.25, f"M* solved: {num(TREE_CROSS, 2)} B (accept 90-95 kB, or 92 KiB)"),
                    (0.25, "the plot: both lines, labelled axes with units"),
                    (0.25, "the crossover marked or stated, with the side where each algorithm wins"),
                ),  # fmt: skip
                wrong=(
                    "Using 1/β = 10 Gb/s (bits): M* 8× smaller (≈ 11.8 kB). −0.25.",
                    "ceil(log2 8) taken as 8 or the tree as one pass (log N (α + Mβ)): a different crossover "
                    "(the tree is reduce *then* broadcast: 2 log N steps). −0.25.",
                    "The ring said to win for small messages: the sign of the inequality flipped. 0 for the value.",
                ),
            ),
            Problem(
                "2",
                "Your benchmark",
                1,
                """Read off the student's own table (`out/bench_collectives.csv`): the smallest size whose ring
ratio (busbw / built-in busbw) is ≥ 0.8, for N = 2 and N = 4. Small messages: the time is latency-bound: each of
the ring's 2(N − 1) steps pays a message's fixed cost (Python call, gloo/NCCL launch, synchronisation) while the
built-in pays it once or uses a lower-latency algorithm, so the ratio is low; as M grows the bytes term dominates
and both approach the link's bandwidth. Bus bandwidth = M/t · 2(N − 1)/N: the bytes each link actually
carries in a ring, comparable across N and algorithms; algorithm bandwidth M/t ignores that an all-reduce
moves 2(N − 1)/N·M per rank, so it changes with N even on the same links (nccl-tests' definition).""",
                expect=(
                    "Reference on a 2-core CPU VM (gloo): the ring reaches 0.8 of the built-in's busbw from a few "
                    "hundred KiB up (N = 2 often from ~64 KiB; N = 4 a size or two later); below ~16 KiB the ratio "
                    "is 0.1-0.5. Any crossing between 64 KiB and 16 MiB is a correct answer: what is graded is "
                    "that the number is read from the student's own run and the reason is latency.",
                    "Sign of a wrong implementation: a ring that never gets above ~0.5 at MiB sizes (a blocking "
                    "send/recv pair per step instead of batched, a copy of the whole buffer each step, or "
                    "the whole tensor sent each step instead of M/N: ratio about N/2× lower), or one that "
                    "is faster than the built-in by > 1.5× at large sizes (it does not reduce everything).",
                ),
                rubric=(
                    (0.25, "a size read from their own table for both world sizes"),
                    (0.25, "the table or plot included"),
                    (0.25, "small messages are latency (per-message cost) bound, 2(N−1) messages vs the built-in"),
                    (0.25, "busbw vs algbw: the 2(N−1)/N factor, comparable across N / the link's load"),
                ),
                wrong=(
                    "'The ring is slower because Python is slow' with no mention of per-message cost: 0 of 0.25.",
                    "Bus bandwidth described as 'the bandwidth of the bus (PCIe)': 0 of 0.25.",
                ),
            ),
            Problem(
                "3",
                "Lower bound",
                0.5,
                """Every one of the M output elements is a sum of N inputs, one per rank. For any element, the
rank(s) that compute its sum need the other N − 1 ranks' values (or partial sums that contain them), so at
least N − 1 values of that element cross a link. Summed over the M elements: at least (N − 1)·M values are sent
in total; split over N ranks, some rank sends at least (N − 1)/N · M. The ring's reduce-scatter pays exactly
that ((N − 1) steps of M/N: each rank ends with the full sum of its 1/N), and the all-gather pays it again:
each finished sum exists on one rank and must reach the N − 1 others. The phases cannot merge: a sum can only
be sent as a result once all N contributions are in, and before that what a rank forwards is a partial sum that
the receiver still has to finish; sending data to *reduce* and sending results to *share* are different
messages. (The tight bound, 2(N − 1)/N · M, is Patarasuk and Yuan's.)""",
                rubric=(
                    (
                        0.25,
                        "the counting argument: N − 1 contributions per element must move, (N − 1)M total, "
                        "so some rank sends ≥ (N − 1)/N · M",
                    ),
                    (
                        0.25,
                        "reduce-scatter pays one, all-gather the other, and why they can't merge (results "
                        "exist only after all contributions arrive)",
                    ),
                ),  # fmt: skip
                wrong=("'Each rank must send its whole buffer' (M): too strong, not a proof. 0 of 0.25.",),
            ),
            Problem(
                "4",
                "All-to-all volume",
                0.5,
                f"""A rank holds T·H bf16 values = 2TH bytes; uniform routing keeps 1/N of the tokens local, so it
sends **2TH(N − 1)/N bytes** and receives the same. An all-reduce of the same 2TH bytes (ring) sends
2(N − 1)/N · 2TH: **twice** the all-to-all, and an all-to-all's data crosses each link once rather than being
reduced and redistributed. Example (T = H = {T}, N = {N4}): all-to-all {nbytes(A2A)} per rank per exchange vs
all-reduce {nbytes(AR)}; `accounting.moe_all_to_all_bytes(T, H, 1, N)` is four of these exchanges
({nbytes(4 * A2A)}: dispatch and combine, forward and backward).""",
                given=("N ranks", "T tokens", "H bf16 values"),
                rubric=(
                    (0.25, "2TH(N − 1)/N bytes sent and received (bf16 = 2 bytes counted)"),
                    (0.25, "comparison: all-reduce is 2(N − 1)/N·2TH, twice as much"),
                ),
                wrong=(
                    "2TH (forgets the 1/N that stays local): 0 of the first 0.25.",
                    "Counting the all-to-all as N·2TH (each rank sends everything to everyone): 0 of 0.25.",
                ),
            ),
            Problem(
                "5",
                "Deadlock",
                0.5,
                """A blocking `send` may not return until the matching receive is posted (NCCL always: send and
receive are a rendezvous, and both are launched on the rank's stream in program order; gloo on torch 2.13
too: its send waits for the peer's receive, measured with two ranks and a 4-element tensor). If every rank
first sends to next, each waits for a receive its neighbour will only post after its own send returns: a cycle
of waits, so nobody progresses, whatever the message size. (Older gloo versions completed some small sends
eagerly, so code that "worked" on small tensors is folklore, not a guarantee.)
`batch_isend_irecv` posts the send and the receive together (on NCCL inside one group call: ncclGroupStart/End),
so every rank's receive is already posted when the neighbour's send arrives; there is no order between them to
deadlock on.""",
                rubric=(
                    (0.25, "cycle of ranks each blocked in send waiting for a receive that is posted after it"),
                    (
                        0.25,
                        "batching posts the send and the receive at once (one group call), so no rank's "
                        "receive waits behind its own send",
                    ),
                ),  # fmt: skip
                wrong=(
                    "'NCCL is asynchronous so it deadlocks': backwards, no credit for the first 0.25.",
                    "'gloo buffers small sends, so it works for small tensors': false on torch 2.13 (two gloo ranks "
                    "that both send first hang at 4 elements); no credit for a claim the student could have run.",
                ),
            ),
            Problem(
                "6",
                "Where is the crossover?",
                1.5,
                f"""`all_reduce_crossover_bytes(8, α, β)` = (2(N − 1) − s)α / ((s − 2(N − 1)/N)β) with s = 3:
8.8 α/β. (a) NVLink: M* = **{nbytes(NVLINK)}** ({num(NVLINK)} B): the 25 MiB bucket gets **{nv(BUCKET)}**,
the 64 KiB activation **{nv(ACT)}**. (b) Ethernet: M* = **{nbytes(ETHER)}** ({num(ETHER)} B): bucket
**{eth(BUCKET)}**, activation **{eth(ACT)}**. (c) N = 1024 with (b)'s links: latency term 2(N − 1)α =
**{seconds(RING_LAT_1024)}**, bandwidth term 2(N − 1)/N · Mβ = **{seconds(RING_BW_1024)}**: the latency term
dominates ({RING_LAT_1024 / RING_BW_1024:.1f}×), and grows linearly with N. A tree has depth log₂N (10 hops,
not 2046); a single tree would make each interior rank send its data twice and leave leaves idle, but NCCL's
double binary tree uses two trees, each carrying half of the data, in which every rank is a leaf in one and
interior in the other, and pipelines the message in chunks down and up the trees, so each rank sends and
receives about M (the ring's 2(N − 1)/N·M order) while latency is O(log N). (d) Rabenseifner pays log₂N
steps in each phase (recursive halving, then doubling: the latency of recursive doubling ×2) while the
messages halve each step, so each rank sends M/2 + M/4 + … = (N − 1)/N · M per phase: the ring's bandwidth.
It needs N a power of two (otherwise fold the extra ranks in and out, two more steps, as §1.7 does).""",
                given=(
                    "N = 8",
                    "α ≈ 5 µs",
                    "1/β ≈ 150 GB/s",
                    "α ≈ 30 µs",
                    "1/β ≈ 3 GB/s",
                    "25 MiB",
                    "64 KiB",
                    "1024 GPUs",
                ),
                rubric=(
                    (0.25, f"(a) and (b): both crossovers, ≈ {nbytes(NVLINK)} and ≈ {nbytes(ETHER)} (±10%)"),
                    (
                        0.25,
                        "(a) and (b): the four choices (ring for the bucket, doubling for the activation, both times)",
                    ),
                    (
                        0.25,
                        f"(c) latency ≈ {seconds(RING_LAT_1024)} vs bandwidth ≈ {seconds(RING_BW_1024)}: latency",
                    ),
                    (0.25, "(c) trees have log N depth; two trees or pipelined chunks keep the bandwidth"),
                    (0.25, "(d) log N messages per phase, halving messages summing to (N − 1)/N·M per phase"),
                    (0.25, "(d) N a power of two (or a fold in and out)"),
                ),  # fmt: skip
                wrong=(
                    "Using 25 Gb/s as 25 GB/s (or 3 GB/s as 3 Gb/s): crossovers off by 8×; −0.25 once.",
                    "Choosing by N alone ('recursive doubling for 8 ranks'): 0 for (a)/(b).",
                    "(c) computed with N = 8: misses the point; 0 for (c)'s numbers.",
                ),
            ),
        ),
    ),
)
