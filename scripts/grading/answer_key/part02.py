"""Answer key, Part 2 (handouts/02-ddp.md §2.5 Benchmark and write-up)."""

from __future__ import annotations

from reference_solutions import accounting as acc
from scripts.grading.answer_key import Problem, Section, nbytes

GRADS = 8.7e6 * 4  # DeepMLP(4, 512, 2048): 8.7M float32 gradients
RING2 = acc.ring_all_reduce_bytes_per_rank(GRADS, 2)
RING8 = acc.ring_all_reduce_bytes_per_rank(GRADS, 8)


def _best_bucket_growth(n_from: int, n_to: int) -> tuple[float, float, float]:
    """Problem 4: (latency growth, bandwidth growth, best-bucket growth) of a ring all-reduce from n_from to n_to
    ranks. b* = sqrt(P alpha' / beta') with alpha' = 2(N - 1) alpha and beta' = 2(N - 1)/N beta."""
    lat = (2 * (n_to - 1)) / (2 * (n_from - 1))
    bw = (2 * (n_to - 1) / n_to) / (2 * (n_from - 1) / n_from)
    return lat, bw, (lat / bw) ** 0.5


LAT_8, BW_8, BEST_8 = _best_bucket_growth(2, 8)
assert abs(BW_8 - RING8 / RING2) < 1e-9  # the bandwidth factor is the ring's bytes per rank, as accounting says

SECTIONS = (
    Section(
        part=2,
        heading="2.5 Benchmark and write-up",
        problems=(
            Problem(
                "1",
                "The table",
                1,
                """The student's table from `python -m scripts.bench.ddp --impl student`, every row present (no
communication, naive, flat, per-parameter overlap, buckets at 1, 5, 25, 100 MiB, torch DDP at the same caps),
with the best bucketed time within 1.1× of torch DDP's best (the script prints the ratio). On a noisy shared
machine 1.1-1.2× with a rerun shown is acceptable.""",
                expect=(
                    "Reference on the course VM (2 cores, gloo, 2 ranks, 8.7M parameters, 33 MiB of grads): "
                    "compute-only ≈ 60-70 ms, naive ≈ 140-150 ms (ratio to torch DDP 1.3-1.4), flat 1.2-1.3, "
                    "per-parameter overlap ≈ 1.05-1.10, bucketed 1.03-1.08 at every cap, torch DDP ≈ 105-115 ms; "
                    "best bucketed / best torch DDP 1.02-1.08.",
                    "Signs of a wrong implementation: bucketed slower than naive or flat (buckets all-reduced "
                    "synchronously, or waited on inside the hook); bucketed at 1 MiB far slower than at 25 MiB "
                    "(> 1.3×: one all-reduce per parameter, not per bucket); every bucketed time equal to flat "
                    "(communication launched only after backward); a ratio < 0.9 (gradients not all reduced).",
                ),
                rubric=(
                    (0.5, "the full table, from their implementation"),
                    (0.5, "best bucketed within 1.1× of torch DDP (1.1-1.2×: 0.25 with a plausible reason)"),
                ),
            ),
            Problem(
                "2",
                "Step time vs bucket size",
                1.5,
                """Small buckets: many all-reduces, each paying the per-call latency α (launch, synchronisation,
on 2(N − 1) ring steps): the α term dominates, so time rises as the cap shrinks (here mildly: the model has few,
large parameters, so even a 1 MiB cap makes few buckets). Large buckets: the first bucket is full only late in
backward and the last one's transfer (bucket·β) cannot overlap anything, so the exposed tail (the β term of the
largest bucket) dominates. At a cap ≥ the model's gradient size (100 MiB > 33 MiB here) there is one bucket,
launched when the last gradient is ready: exactly §2.2's flat DDP (one all-reduce of all gradients), and the
curve meets flat's time.""",
                expect=(
                    "Reference: a flat-ish curve on CPU (1 to 100 MiB within ~10% of each other, because compute "
                    "and communication share 2 cores); on GPUs a U shape with the minimum around 5-25 MiB.",
                    "Wrong sign: time falling monotonically to the 100 MiB point and below flat (something is not "
                    "synchronised at the end of backward).",
                ),
                rubric=(
                    (0.5, "small end: per-call latency (α, number of buckets)"),
                    (0.5, "large end: lost overlap, the last bucket's transfer exposed (β × bucket)"),
                    (0.5, "the largest cap = one bucket = flat DDP (§2.2)"),
                ),
                wrong=("'Bigger buckets use more memory so they are slower': not the reason. 0 of 0.5.",),
            ),
            Problem(
                "3",
                "Communication/computation ratio and what overlap hid",
                1.5,
                """Ratio = (naive − compute-only) / compute-only, from their table (the script prints it). Overlap
can hide at most the communication that fits behind backward: min(communication, backward time), and backward
is about 2/3 of the compute-only step (twice the forward's FLOPs), and never the last bucket's transfer. What it
hid: (naive − bucketed) / (naive − compute-only). On the CPU VM compute and communication share the same two
cores, so overlap hides much less than on a GPU (where NCCL runs on its own stream and links).""",
                expect=(
                    "Reference: compute-only ≈ 64 ms, naive ≈ 148 ms: ratio ≈ 1.3 (1.0-1.5 on an idle VM); "
                    "bucketed hides ≈ 30-40% of the communication (naive 84 ms over compute-only, bucketed ≈ 52). "
                    "At most hideable ≈ 2/3 of 64 ms ≈ 43 ms.",
                    "Wrong sign: overlap 'hid' more than the backward's duration, or a negative amount (bucketed "
                    "slower than naive).",
                ),
                rubric=(
                    (0.5, "the ratio computed from their table"),
                    (0.5, "the bound: backward's duration (≈ 2/3 of compute) / the last bucket cannot hide"),
                    (0.25, "how much was hidden here, computed from their table"),
                    (0.25, "the CPU-contention remark (compute and communication share the cores) or similar"),
                ),
            ),
            Problem(
                "4",
                "The best bucket size when α, β or N change",
                1,
                f"""With P gradient bytes and buckets of b bytes, the exposed cost is about (P/b)·α' + b·β' (the
launches, and the last bucket's unhidden transfer), minimised at b* ≈ √(P·α'/β'). Faster network (smaller β):
the tail is cheaper, so **larger** buckets (and less to tune: communication hides anyway). Higher per-call
latency α: **larger** buckets (fewer calls). 8 ranks instead of 2: a ring all-reduce's latency term grows as
2(N − 1)α ({LAT_8:g}× from N = 2 to 8) while its bytes per rank grow only {BW_8:g}× (2(N − 1)/N·M:
{nbytes(RING2)} at N = 2 vs {nbytes(RING8)} at N = 8 for these grads), so α'/β' grows {LAT_8 / BW_8:g}×:
**larger** buckets, ≈ √{LAT_8 / BW_8:g} = **{BEST_8:.1f}×** by the model.""",
                given=("8 ranks instead of 2",),
                rubric=(
                    (0.25, "smaller β: larger buckets (or 'matters less'), with a reason"),
                    (0.25, "larger α: larger buckets"),
                    (0.25, "8 ranks: latency term grows 7×, bytes per rank only 1.75×: larger buckets"),
                    (0.25, f"by about {BEST_8:.0f}× (√{LAT_8 / BW_8:g}; accept 1.5-2.5×)"),
                ),
                wrong=(
                    "'More ranks: smaller buckets because each rank sends less': each rank sends about as much "
                    "(2(N − 1)/N·M). 0 of both 8-rank lines.",
                    "√7 ≈ 2.6× (the latency growth without the 1.75× bandwidth growth): the first 8-rank line only.",
                ),
            ),
        ),
    ),
)
