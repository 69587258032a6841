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
# 3, the bound on one GPU: 256 MiB staged into fresh pageable memory blocked 198 ms on an H100 (2026-11-27).
STAGED_256, BLOCKED_256 = 256 * 2**20, 0.198
PAGEABLE_RATE = STAGED_256 / BLOCKED_256
PINNED_256 = STAGED_256 / D2H  # the same bytes into pinned memory at 25 GB/s: the least an async save can block

# 6. What a failure costs: 419 unexpected interruptions in 54 days, checkpoints every 30 minutes.
DAY, INTERVAL = 86_400.0, 1800.0
FAILURES_PER_DAY = 419 / 54
RESTART_COST = 30 + 120 + 60 + INTERVAL / 2  # detect, relaunch, load, half an interval of lost work
SHARD_70B_64 = 70e9 * 14 / 64  # one replica's shard per GPU: 70B x 14 bytes over 64 GPUs
LIVE_COST = 30 + SHARD_70B_64 / 50e9 + 10  # detect, transfer at 50 GB/s, the step in flight

# 7. Choosing the timeout: P(gap > T) = exp(-T / 0.2 s) per rank-second, 16,384 ranks for 54 days.
RANK_SECONDS = 16_384 * 54 * DAY
TIMEOUT = 0.2 * math.log(RANK_SECONDS)  # expected false alarms = RANK_SECONDS * exp(-T / 0.2) = 1
NOTICE = TIMEOUT + 1.0  # at worst: the timeout after the last heartbeat, which is up to 1 s old

LOST_RESTART, LOST_LIVE = FAILURES_PER_DAY * RESTART_COST / DAY, FAILURES_PER_DAY * LIVE_COST / DAY
CLUSTER_H, NCCL_H = 419 * NOTICE / 3600, 419 * 600 / 3600

# 8. 256 replicas of 8 GPUs (TP = 8), global batch 1024; one node (a replica) dies, no spare.
HEALTHY = 255
NEW_WORLD = max(w for w in range(1, HEALTHY + 1) if 1024 % w == 0)


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
                given=("70B", "14 bytes per parameter", "1024 GPUs", "2 GB/s", "1 TB/s"),
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
                given=("4096-byte", "(8192, 28672)", "bf16", "TP = 2", "TP = 4"),
                rubric=(
                    (0.25, f"needed {num(NEEDED / 1e6)} MB (±5%)"),
                    (0.25, f"read {num(READ / 1e6)} MB in {ROWS} calls (±5%)"),
                    (0.25, f"one checksum per box reads the whole box ({num(BOX / 1e6)} MB, 2×)"),
                    (0.25, "no checksum: corruption loads silently"),
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
(R/M = {R / M:.3f}) dominates both, so faster restarts (spares, live recovery) are worth more.
The bound on one GPU: 256 MiB in 198 ms is **{num(PAGEABLE_RATE / 1e9)} GB/s**; into pinned memory at 25 GB/s the
same bytes take **{seconds(PINNED_256)}**, about **{BLOCKED_256 / PINNED_256:.0f}×** less. Pageable memory costs
(1) the driver's copy through its own small pinned bounce buffer, chunk by chunk and synchronous (no DMA into
the destination, no copy queued behind another), and (2) a page fault for each 4 KiB page of a freshly allocated
host tensor the first time it is written. Pinned buffers allocated once and kept between saves avoid both.""",
                given=("25 GB/s", "8 GPUs", "M = 11 135 s", "R = 600 s", "256 MiB", "198 ms"),
                rubric=(
                    (0.25, f"staging {seconds(STAGE)}"),
                    (0.25, f"{num(8 * SHARD / 1e9)} / {num(16 * SHARD / 1e9)} GB pinned"),
                    (0.25, f"goodput {GOOD_SYNC:.3f} vs {GOOD_ASYNC:.3f} (±0.005)"),
                    (
                        0.25,
                        f"the bound: {num(PAGEABLE_RATE / 1e9)} GB/s, ~{BLOCKED_256 / PINNED_256:.0f}× the "
                        f"{seconds(PINNED_256)} pinned copy (±10%)",
                    ),
                ),
                wrong=(
                    "Using the total checkpoint (980 GB) per node for the pinned memory: −0.25.",
                    "256 MiB taken as 256e6 bytes: accept (within the ±10%).",
                    "No cost of pageable memory named (bounce buffer, page faults): −0.25 from the bound's line.",
                ),
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
                    (0.25, "the list (RNG of every rank, sampler position, step, optimizer state)"),
                    (0.25, "~KB per rank"),
                    (0.25, "at another size: summation order and RNG streams change"),
                    (0.25, "one nondeterministic GPU kernel named"),
                ),
                wrong=("Only the model and optimizer state: 0 for the list and its size.",),
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
                    (0.25, "a profile of one save"),
                    (0.25, "a change justified by the profile"),
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
            Problem(
                "6",
                "What a failure costs",
                1,
                f"""(a) Restart from disk: 30 + 120 + 60 s plus half the 30-minute interval =
**{seconds(RESTART_COST)}** per failure. Live recovery: 30 s to detect, one replica's shard
({num(SHARD_70B_64 / 1e9)} GB per GPU) over 50 GB/s in {seconds(SHARD_70B_64 / 50e9)}, and the 10 s step in
flight: **{seconds(LIVE_COST)}**. (b) {FAILURES_PER_DAY:.2f} failures a day: **{LOST_RESTART:.1%}** of the day
lost with restarts, **{LOST_LIVE:.2%}** with live recovery. (c) Live recovery needs a healthy replica
holding the same state: a failure that takes out every copy (a rack, a switch, correlated node failures), a
corrupted state (a NaN, a bad step, a software bug) that every replica shares, and the planned interruptions
(47 of the 466) all need a checkpoint on disk; so do evaluation and releasing the weights.""",
                given=(
                    "419 times in 54 days",
                    "30 minutes",
                    "30 s",
                    "120 s",
                    "60 s",
                    "half an interval",
                    "64 GPUs",
                    "50 GB/s",
                    "10 s",
                ),
                rubric=(
                    (0.25, f"restart: {seconds(RESTART_COST)} per failure (±10%)"),
                    (0.25, f"live recovery: {seconds(LIVE_COST)} per failure (±10%)"),
                    (0.25, f"~{LOST_RESTART:.0%} against ~{LOST_LIVE:.1%} of the day"),
                    (0.25, "one reason to keep checkpointing"),
                ),
                wrong=("Forgetting the half interval of lost work: 210 s, −0.25.",),
            ),
            Problem(
                "7",
                "Choosing the timeout",
                1,
                f"""{num(RANK_SECONDS)} rank-seconds in the run; false alarms are expected
{num(RANK_SECONDS)}·e^(−T/0.2 s), below one for T > 0.2·ln({num(RANK_SECONDS)}) = **{TIMEOUT:.1f} s**.
A real failure is then noticed at most T + 1 s = **~{NOTICE:.0f} s** after the last heartbeat. 419 failures
cost 419 × {NOTICE:.0f} s = **{CLUSTER_H:.1f} h** of the whole cluster
({num(CLUSTER_H * 16_384)} GPU-hours) instead of 419 × 10 min = **{NCCL_H:.1f} h**
({num(NCCL_H * 16_384)} GPU-hours) with NCCL's default.""",
                given=("e^(-T/0.2 s)", "54-day", "16,384 ranks", "1 s heartbeats", "419 failures", "10-minute"),
                rubric=(
                    (0.5, f"T ≈ {TIMEOUT:.1f} s (accept 5-6 s) from the count of rank-seconds"),
                    (0.25, f"~{NOTICE:.0f} s to notice"),
                    (0.25, f"~{CLUSTER_H:.1f} h against ~{NCCL_H:.0f} h of cluster time"),
                ),
                wrong=("Counting ranks but not seconds (T ≈ 1.9 s): a false alarm every few minutes; −0.5.",),
            ),
            Problem(
                "8",
                "The world size after a loss",
                1,
                f"""255 replicas are left; the largest world size ≤ 255 dividing the global batch of 1024 is
**{NEW_WORLD}** replicas: **{1 - NEW_WORLD / 256:.0%}** of the throughput is lost for one node in 256 (0.4% of the
hardware). Better: uneven per-replica batches (1024 = 255 × 4 + 4: four replicas take 5 sequences, gradients
averaged with weights by their sample counts), gradient accumulation so that each replica's microbatches add
up to the same global batch, a slightly smaller global batch (1020) with the learning rate rescaled, or a hot
spare node that takes the lost replica's place (Meta's answer).""",
                given=("256 data-parallel replicas", "TP = 8", "1,024 sequences"),
                rubric=(
                    (0.25, f"{NEW_WORLD} replicas"),
                    (0.25, f"{1 - NEW_WORLD / 256:.0%} of the throughput lost"),
                    (0.5, "two ways to do better"),
                ),
                wrong=("255 replicas (does not divide 1024): 0 for the replicas and the throughput lines.",),
            ),
        ),
    ),
)
