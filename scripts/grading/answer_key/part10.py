"""Answer key, Part 10 (handouts/10-failures.md, 10.8 Written problems). Numbers from accounting."""

from __future__ import annotations

import math

from reference_solutions import accounting as acc
from scripts.grading.answer_key import Problem, Section, nbytes, num, seconds

# 1. 70B, 14 bytes per parameter (bf16 weights 2 + fp32 master and two moments 12), 1024 GPUs.
P, N, GPU_BW, FS_BW = 70e9, 1024, 2e9, 1e12
TOTAL = P * 14


def _save_seconds(zero_stage: int) -> tuple[float, float, float]:
    """(busiest rank's bytes, its own write time, the filesystem's time for everything): the save takes the larger."""
    busiest = acc.checkpoint_bytes_per_rank(P, N, zero_stage, param_bytes=2, optimizer_bytes=12)
    return busiest, busiest / GPU_BW, TOTAL / FS_BW


FSDP, DDP, ZERO1 = _save_seconds(3), _save_seconds(0), _save_seconds(1)

# 2. A row-parallel (8192, 28672) bf16 weight saved at TP = 2 (boxes of 14336 columns), loaded at TP = 4.
ROWS, COLS, E, BLOCK = 8192, 28672, 2, 4096
SAVED_ROW = COLS // 2 * E  # bytes of one row of a saved box
NEEDED_ROW = COLS // 4 * E  # bytes of one row a TP = 4 rank needs: half a saved row
# The needed half-row starts at 0 or at SAVED_ROW / 2 inside a saved row; rows start on block boundaries
# (SAVED_ROW is a multiple of 4096), so each row touches ceil(NEEDED_ROW / BLOCK) whole blocks.
assert SAVED_ROW % BLOCK == 0
READ_ROW = math.ceil(NEEDED_ROW / BLOCK) * BLOCK
NEEDED, READ, BOX = ROWS * NEEDED_ROW, ROWS * READ_ROW, ROWS * SAVED_ROW

# 3. Staging FSDP's shard at 25 GB/s; §10.7's goodput with M = 11_135 s, R = 600 s.
M, R, D2H = 11_135.0, 600.0, 25e9
SHARD = FSDP[0]
STAGE = SHARD / D2H
SYNC_C = max(FSDP[1], FSDP[2])
TAU_SYNC = acc.checkpoint_interval(SYNC_C, M)
TAU_ASYNC = acc.async_checkpoint_interval(STAGE, SYNC_C, M)
GOOD_SYNC = acc.checkpoint_goodput(TAU_SYNC, SYNC_C, R, M)
GOOD_ASYNC = acc.checkpoint_goodput(TAU_ASYNC, STAGE, R, M, write_seconds=SYNC_C)


def _binds(busiest: float, own: float, fs: float) -> str:
    return "the filesystem's 1 TB/s" if fs >= own else "the busiest rank's 2 GB/s"


SECTIONS = (
    Section(
        part=10,
        heading="10.8 Written problems",
        problems=(
            Problem(
                "1",
                "Who writes, and how long",
                1,
                f"""The checkpoint is P·14 = **{nbytes(TOTAL)}** ({num(TOTAL / 1e9)} GB). A save lasts as long as the
slower of the busiest rank's own write and the filesystem's share:
- FSDP: every rank writes {num(FSDP[0] / 1e9)} GB, {seconds(FSDP[1])} at 2 GB/s, but all of it at 1 TB/s takes
  {seconds(FSDP[2])}: **≈ {seconds(max(FSDP[1], FSDP[2]))}**, {_binds(*FSDP)} binds.
- DDP, rank 0 writes everything: {num(DDP[0] / 1e9)} GB at 2 GB/s = **{seconds(DDP[1])}**; {_binds(*DDP)} binds
  (the filesystem idles at 0.2% of its bandwidth).
- ZeRO-1: rank 0 writes the bf16 weights and its optimizer slice, {num(ZERO1[0] / 1e9)} GB =
  **{seconds(ZERO1[1])}**; {_binds(*ZERO1)} binds. Balancing the replicated weights over the ranks (as DCP
  does) brings both DDP and ZeRO-1 down to FSDP's {seconds(max(FSDP[1], FSDP[2]))}.""",
                rubric=(
                    (
                        0.5,
                        f"the three times: ~{seconds(SYNC_C)}, ~{seconds(DDP[1])}, ~{seconds(ZERO1[1])} (±10%)",
                    ),
                    (0.5, "which limit binds: the filesystem for FSDP, rank 0's own bandwidth for DDP and ZeRO-1"),
                ),
                wrong=(
                    f"FSDP at {seconds(FSDP[1])} (the per-rank write alone, ignoring the filesystem): −0.25.",
                    "Counting gradients in the checkpoint (16 bytes per parameter): −0.25.",
                ),
            ),
            Problem(
                "2",
                "The price of checksums",
                1,
                f"""At TP = 2 a row-parallel weight is split along its columns: each saved box is ({ROWS}, {COLS // 2}),
rows of {SAVED_ROW} bytes ({SAVED_ROW // BLOCK} blocks). A TP = 4 rank needs half of each saved row:
{NEEDED_ROW} bytes, {ROWS} rows, **{num(NEEDED / 1e6)} MB**. The half-row starts on a block boundary or in the
middle of one, so it touches {READ_ROW // BLOCK} blocks: it reads **{num(READ / 1e6)} MB**
(+{READ / NEEDED - 1:.1%}) in **{ROWS} `read` calls** (one per row: the blocks of a row are contiguous).
One checksum per saved box would force reading the whole box, {num(BOX / 1e6)} MB ({BOX / NEEDED:.0f}× what is
needed), to verify it; no checksum reads exactly what is needed but loads a flipped or truncated byte
silently into training.""",
                rubric=(
                    (0.5, f"needed {num(NEEDED / 1e6)} MB and read {num(READ / 1e6)} MB in {ROWS} calls (±5%)"),
                    (0.5, f"the whole box ({num(BOX / 1e6)} MB, 2×) with one checksum; silent corruption without"),
                ),
                wrong=("Splitting along rows (a column-parallel weight): one contiguous read, +0%: −0.5.",),
            ),
            Problem(
                "3",
                "What async buys",
                1,
                f"""Staging copies the rank's {num(SHARD / 1e9)} GB shard at 25 GB/s: **{seconds(STAGE)}** of blocking.
A node of 8 GPUs needs 8 × {num(SHARD / 1e9)} = **{num(8 * SHARD / 1e9)} GB** of pinned host memory for one save
in flight, **{num(16 * SHARD / 1e9)} GB** for two.
Synchronous: C = {seconds(SYNC_C)}, τ* = √(2CM) = {seconds(TAU_SYNC)}, goodput **{GOOD_SYNC:.3f}**.
Asynchronous: S = {seconds(STAGE)}, W = {seconds(SYNC_C)}, τ* = max(√(2SM), W) = {seconds(TAU_ASYNC)}, goodput
**{GOOD_ASYNC:.3f}**. The gain is small here because FSDP's save is already short; the 600 s restart
(R/M = {R / M:.3f}) dominates both, so faster restarts (spares, live recovery) are worth more.""",
                rubric=(
                    (0.5, f"staging {seconds(STAGE)} and {num(8 * SHARD / 1e9)} / {num(16 * SHARD / 1e9)} GB pinned"),
                    (0.5, f"goodput {GOOD_SYNC:.3f} vs {GOOD_ASYNC:.3f} (±0.005) with the restart named as dominant"),
                ),
                wrong=("Using the total checkpoint (980 GB) per node for the pinned memory: −0.25.",),
            ),
            Problem(
                "4",
                "Exact is fragile",
                1,
                """A bit-exact resume needs: parameters and optimizer state (moments and step), every rank's RNG
states (torch CPU: 5056 bytes; 16 bytes per CUDA generator; Python's `random`, ~2.5 KB pickled; NumPy's if
used), the sampler's epoch and position, and the step counter: **under ~8 KB per rank** beyond the model
state. At another world size the gradient all-reduce adds in another order and the per-rank batches differ,
so float rounding differs, and per-rank RNG streams (dropout masks) have no mapping to the new ranks: equal
to tolerance, not bit for bit. On GPUs, kernels with atomic adds (`index_add_`/`scatter_add_` in an
embedding's backward) or cuBLAS's split-K choices change summation order from run to run even at the same
size, unless deterministic algorithms are forced.""",
                rubric=(
                    (0.5, "the list (RNG of every rank, sampler position, step, optimizer state) with ~KB per rank"),
                    (0.5, "summation order / RNG streams at another size; one nondeterministic GPU kernel named"),
                ),
                wrong=("Only the model and optimizer state: 0 of the first 0.5.",),
            ),
            Problem(
                "5",
                "Measure it",
                1,
                """Graded on the student's own table and plot: save and load throughput against DCP's, the async
blocking time as a fraction of a synchronous save, DCP's `async_save` blocking time, and a profile of one
save with a concrete next change (e.g. fewer, larger writes; checksumming in the background thread).""",
                rubric=(
                    (0.5, "the four numbers reported as ratios with their intervals"),
                    (0.5, "a profile of one save and a change justified by it"),
                ),
                expect=(
                    "The reference on the course VM (2-core CPU, gloo, smallest sizes): save ~2-3x DCP's throughput, "
                    "load ~3-6x; async blocking 0.04-0.4 of a synchronous save; DCP's async_save blocks 20-40 ms "
                    "at 1 MiB.",
                    "Signs of a wrong implementation: async blocking as long as a synchronous save (no staging, or "
                    "the write on the training thread); load slower than save by far more than 2x (whole boxes "
                    "read, or each block read separately).",
                ),
            ),
        ),
    ),
)
