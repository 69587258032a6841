"""Checkpoints that survive failures: sharded atomic save, resharding load, exact resume, async save.

Your task (handouts/10-failures.md §10.1-10.4): implement the functions and the class marked below.
Large jobs fail all the time (Llama 3 405B: 419 unexpected interruptions in 54 days), so a job must
be able to stop at any moment and continue from its last checkpoint, possibly on a different number
of ranks. A checkpoint is a folder per step; every rank writes only its own piece of every tensor:

    <directory>/step_<step:08d>/          one folder per saved step
        (your files)                      each rank's tensor bytes, checksums, the metadata to reassemble
        COMMITTED                         the commit marker, written last, by group rank 0 only

What a state dict holds (``state: dict[str, value]``, keys are free-form strings):

    Shard(local, global_shape, offsets)   this rank's box of one global tensor (FSDP, TP, ZeRO pieces)
    torch.Tensor                          a tensor every rank holds whole (= a Shard with offsets 0)
    anything else (int, float, bytes, a picklable object)   saved by every rank for itself; load returns
                                          the values of the rank with the same group rank (or group
                                          rank 0's when the checkpoint has no such rank)

Boxes: a Shard's ``local`` covers ``global[offsets[0]:offsets[0]+local.shape[0], offsets[1]:...]``.
The boxes of all ranks together must cover the global tensor; boxes may repeat on several ranks
(replicas: data parallelism, a replicated bias), and then only one of them is written (the one of
the lowest group rank). Loading fills every requested box from whichever saved boxes overlap it, so
a checkpoint saved with one layout loads into another (FSDP on 4 ranks into FSDP on 3; DP x TP into
TP alone; ZeRO-2 optimizer shards into plain DDP).

Files go to a shared filesystem every rank sees (one machine in the tests; a cluster's parallel
filesystem in practice). ``latest_checkpoint`` and ``verify_checkpoint`` read files only and need no
process group; ``save_checkpoint`` and ``load_checkpoint`` are collective over ``group``.

The helpers at the bottom (given) turn the kit's models and optimizers into such state dicts:
``module_state`` (a replicated model: DDP, ZeRO-1/2), ``fsdp_state`` (FSDP's flat weight shards),
``tensor_parallel_state`` (Column/RowParallelLinear boxes), ``optimizer_state`` (an optimizer's
per-parameter state, boxed like its parameter) and ``init_optimizer_state``.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import copy
import ctypes
import itertools
import json
import math
import os
import pickle
import random
import shutil
import struct
import threading
import zlib
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from cs336_systems import platform_support

__all__ = [
    "Shard",
    "TornCheckpoint",
    "COMMIT_MARKER",
    "CHECKSUM_BLOCK_BYTES",
    "step_directory",
    "save_checkpoint",
    "latest_checkpoint",
    "verify_checkpoint",
    "load_checkpoint",
    "DistributedSampler",
    "capture_training_state",
    "restore_training_state",
    "AsyncCheckpointer",
    "module_state",
    "fsdp_state",
    "tensor_parallel_state",
    "optimizer_state",
    "init_optimizer_state",
]

COMMIT_MARKER = "COMMITTED"  # the file whose presence (and valid content) makes a step folder a checkpoint
CHECKSUM_BLOCK_BYTES = 4096  # a checksum covers at most this many bytes: a load reads (and checks) whole blocks


@dataclass
class Shard:
    """This rank's box of one global tensor.

    ``local`` holds ``global[offsets[0] : offsets[0] + local.shape[0], offsets[1] : ...]`` of a tensor
    of shape ``global_shape`` (same number of dimensions; an empty box is allowed). A tensor held whole
    (replicated) is ``Shard(t, tuple(t.shape), (0,) * t.dim())``. When several ranks hold the same box
    (data-parallel replicas), all of them pass it to ``save_checkpoint`` and the one with the lowest
    group rank writes it. ``load_checkpoint`` writes into ``local`` in place, so ``local`` may be a
    view of a parameter (it must then be the parameter's own storage, not a copy).
    """

    local: torch.Tensor
    global_shape: tuple[int, ...]
    offsets: tuple[int, ...]

    def __post_init__(self) -> None:
        self.global_shape = tuple(int(s) for s in self.global_shape)
        self.offsets = tuple(int(o) for o in self.offsets)


class TornCheckpoint(RuntimeError):
    """A step folder that is not a complete, intact checkpoint; the message names what is missing or
    corrupt (the commit marker, a rank's file, a checksum that does not match, ...)."""


def step_directory(directory: str | os.PathLike, step: int) -> Path:
    """``<directory>/step_<step:08d>``: the folder of one step's checkpoint."""
    return Path(directory) / f"step_{step:08d}"


# BEGIN SOLUTION
# ---------------------------------------------------------------------------------------------
# Private plumbing shared by save, verify and load.
#
# A step folder holds, per group rank r, ``rank_<r:05d>.data``: the raw bytes of the boxes r writes,
# one after the other, then r's pickled non-tensor values ("objects"). ``metadata.json`` (group rank
# 0) lists, per rank, that file's size and, per box, key, dtype, shapes, offsets, where its bytes
# start and the CRC32 of each block. ``COMMITTED`` holds the step and the metadata's own CRC32.
# ---------------------------------------------------------------------------------------------

try:  # ISA-L's CRC32 (pip package isal): zlib.crc32's values, 2-3 times as fast on 4 KiB blocks
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # the same checksums, slower
    _crc32 = zlib.crc32

_METADATA = "metadata.json"
_OBJECTS = "__objects__"  # the pseudo-key of a rank's pickled non-tensor values
# Files move in pieces of 2048 checksum blocks: checksums of one piece overlap the write (or read) of another.
# Big enough that the I/O thread, which needs the GIL between two pieces while this thread holds it through
# the per-block checksums, waits for it (up to ``sys.getswitchinterval()``, 5 ms) far less often than it works.
_PIECE_BYTES = 8 << 20
# One write() call hands the kernel at most this much: on the Linux machines this kit was measured on, 16 MiB
# reached a new file's page cache in 4 ms in calls of 64-512 KiB and in 23 ms in calls of 1 MiB or more.
_WRITE_BYTES = 512 << 10


def _data_name(rank: int) -> str:
    return f"rank_{rank:05d}.data"


def _as_bytes(t: torch.Tensor) -> memoryview:
    """The row-major bytes of ``t`` (on CPU), without a copy when it is already contiguous on CPU."""
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy()) if flat.numel() else memoryview(b"")


def _block_crcs(data: memoryview | bytes) -> list[int]:
    return [_crc32(data[i : i + CHECKSUM_BLOCK_BYTES]) for i in range(0, len(data), CHECKSUM_BLOCK_BYTES)]


def _pack_crcs(crcs: list[int]) -> str:
    """Block checksums as the metadata stores them: little-endian uint32s in base64, one string per box
    (a JSON list of 65,536 numbers per 256 MiB took every loading rank tens of milliseconds to parse)."""
    return base64.b64encode(struct.pack(f"<{len(crcs)}I", *crcs)).decode()


def _box_crcs(box: dict) -> list[int]:
    """A saved box's block checksums as ints, decoded once (in place) when a load or verify needs them."""
    if isinstance(box["crcs"], str):
        raw = base64.b64decode(box["crcs"])
        box["crcs"] = list(struct.unpack(f"<{len(raw) // 4}I", raw))
    return box["crcs"]


def _writeback_starter():
    """Linux's ``sync_file_range``, or None elsewhere. Asking the kernel to start writing a piece to disk as
    soon as it is in the page cache lets the disk work while later pieces are checksummed and copied, so the
    final fsync waits only for the tail (data is durable only after that fsync, as before)."""
    if not platform_support.is_linux():  # macOS has no sync_file_range (CS336_PLATFORM=macos takes this branch)
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):  # not Linux (macOS has no sync_file_range)
        return None
    fn.argtypes, fn.restype = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint], ctypes.c_int
    return fn


_START_WRITEBACK = _writeback_starter()
_SYNC_FILE_RANGE_WRITE = 2  # start writeback of the range's dirty pages; do not wait for it


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomically(path: Path, chunks: Iterable, *, rename: bool = True) -> Path:
    """Write ``chunks`` to ``path`` so the name never points at a partial file: a temporary name,
    flush + fsync, then ``os.replace`` (``rename=False``: the caller renames the returned temporary
    path). A list of chunks is written here; a generator's chunks go to one writer thread (a write
    releases the GIL), so while it writes a chunk this thread computes the next one, and after each chunk
    it starts the disk on it (``_writeback_starter``)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        if isinstance(chunks, list):
            for chunk in chunks:
                f.write(chunk)
        else:
            _write_pieces(f, chunks)
        f.flush()
        os.fsync(f.fileno())
    if rename:
        os.replace(tmp, path)
    return tmp


def _write_pieces(f, chunks: Iterator) -> None:
    """``chunks`` into ``f`` by a writer thread, each chunk's writeback started once it is written."""

    def write(chunk) -> None:
        chunk, start = memoryview(chunk), f.tell()
        for at in range(0, len(chunk), _WRITE_BYTES):  # big calls go past the file's buffer straight to the kernel
            f.write(chunk[at : at + _WRITE_BYTES])
        if _START_WRITEBACK is not None:
            _START_WRITEBACK(f.fileno(), start, len(chunk), _SYNC_FILE_RANGE_WRITE)

    with ThreadPoolExecutor(1, thread_name_prefix="checkpoint-writer") as writer:
        pending = collections.deque()
        for chunk in chunks:
            pending.append(writer.submit(write, chunk))
            while pending and pending[0].done():
                pending.popleft().result()  # a failed write stops the save at once
        for done in pending:
            done.result()


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name.removeprefix("torch."))


def _check_box(key: str, shard: Shard) -> None:
    local, shape, offsets = shard.local, shard.global_shape, shard.offsets
    if len(shape) != local.dim() or len(offsets) != local.dim():
        raise ValueError(f"state[{key!r}]: the box's offsets {offsets} and global shape {shape} must have "
                         f"local's {local.dim()} dimensions")  # fmt: skip
    if any(o < 0 or o + n > s for o, n, s in zip(offsets, local.shape, shape)):
        raise ValueError(f"state[{key!r}]: the box at offsets {offsets} of shape {tuple(local.shape)} does not "
                         f"fit in the global shape {shape}")  # fmt: skip


def _group_info(group) -> tuple[int, int, list[int]]:
    """(my rank in ``group``, its size, its global ranks) — (0, 1, [0]) without a process group."""
    if not dist.is_available() or not dist.is_initialized():
        return 0, 1, [0]
    ranks = dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)
    return ranks.index(dist.get_rank()), len(ranks), ranks


def _all_gather_object(obj, group, world: int) -> list:
    if world == 1:
        return [obj]
    out = [None] * world
    dist.all_gather_object(out, obj, group=group)
    return out


def _broadcast_object(obj, group, world: int, ranks: list[int]):
    if world == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=ranks[0], group=group)
    return box[0]


def _read_committed(folder: Path, check_sizes: bool = True) -> dict:
    """The metadata of a committed step folder, or ``TornCheckpoint`` saying what is wrong."""
    if not folder.is_dir():
        raise TornCheckpoint(f"{folder}: missing (no such checkpoint folder)")
    marker = folder / COMMIT_MARKER
    try:
        commit = json.loads(marker.read_text())
    except FileNotFoundError:
        raise TornCheckpoint(f"{folder}: no {COMMIT_MARKER} marker (the save never committed)") from None
    except (ValueError, OSError) as exc:
        raise TornCheckpoint(f"{folder}: unreadable {COMMIT_MARKER} marker ({exc})") from None
    try:
        raw = (folder / _METADATA).read_bytes()
    except FileNotFoundError:
        raise TornCheckpoint(f"{folder}: {_METADATA} is missing") from None
    if not isinstance(commit, dict) or commit.get("metadata_crc32") != zlib.crc32(raw):
        raise TornCheckpoint(f"{folder}: the {COMMIT_MARKER} marker does not match {_METADATA} (checksum mismatch)")
    meta = json.loads(raw)
    if check_sizes:
        for r, info in enumerate(meta["ranks"]):
            path = folder / info["file"]
            if not path.is_file():
                raise TornCheckpoint(f"{folder}: rank {r}'s file {info['file']} is missing")
            if path.stat().st_size != info["size"]:
                raise TornCheckpoint(f"{folder}: rank {r}'s file {info['file']} has {path.stat().st_size} bytes, "
                                     f"the metadata says {info['size']}")  # fmt: skip
    return meta


def _check_blocks(data: bytes | bytearray | memoryview, first_block: int, crcs: list[int], what: str) -> None:
    data = memoryview(data)  # slices of a memoryview are views: no copy per block
    got = _block_crcs(data)
    if got != crcs[first_block : first_block + len(got)]:
        bad = next(i for i, (g, c) in enumerate(zip(got, crcs[first_block:])) if g != c)
        raise TornCheckpoint(f"checksum mismatch in {what} (block {first_block + bad})")


def _direct_target(shard: Shard, box: dict, lo, hi, runs, ranges) -> memoryview | None:
    """The bytes of ``shard.local`` to read the overlap straight into, or None when it needs a staging
    buffer: it must be one run that starts and ends on the saved box's block boundaries (so the blocks
    read are exactly the overlap's bytes) and land in a contiguous region of a CPU tensor."""
    if shard.local.device.type != "cpu" or len(runs) != 1 or len(ranges) != 1:
        return None
    (a, b), (r0, r1) = runs[0], ranges[0]
    if a != r0 * CHECKSUM_BLOCK_BYTES or b != min(r1 * CHECKSUM_BLOCK_BYTES, box["nbytes"]):
        return None
    target = shard.local.detach()[tuple(slice(x - o, y - o) for x, y, o in zip(lo, hi, shard.offsets))]
    if not target.is_contiguous() or target.numel() == 0:
        return None
    return memoryview(target.reshape(-1).view(torch.uint8).numpy())


def _read_plan(plan: list, folder: Path, reads: list | None) -> None:
    """Read, check and copy every planned overlap. A reader thread reads pieces of ``_PIECE_BYTES`` a few
    ahead (a read releases the GIL) while this thread checks each piece's blocks. An overlap that is whole
    blocks of a contiguous CPU region is read straight into the tensor (``_direct_target``: no copy);
    any other is read into one staging buffer per block range, whose runs are then sliced out (views) and
    copied into the box once."""

    def pieces() -> Iterator:  # (staging tensor or None, the range's bytes, where the piece starts, file, start, stop)
        for _, shard, name, box, _, _, _, ranges, direct in plan:
            for r0, r1 in ranges:
                start = box["start"] + r0 * CHECKSUM_BLOCK_BYTES
                stop = box["start"] + min(r1 * CHECKSUM_BLOCK_BYTES, box["nbytes"])
                # host staging for the file reads, not zero-filled: every byte is read over; pinned for a CUDA box,
                # so that its copy to the device is queued (non_blocking) while the next range is read and checked
                staging = None
                if direct is None:
                    staging = _host_bytes(stop - start, shard.local.is_cuda)
                buffer = direct if direct is not None else memoryview(staging.numpy())
                for at in range(0, stop - start, _PIECE_BYTES):
                    yield staging, buffer, at, name, start + at, min(start + at + _PIECE_BYTES, stop)

    def read(buffer: memoryview, at: int, name: str, start: int, stop: int) -> int:
        files[name].seek(start)
        return files[name].readinto(buffer[at : at + stop - start])

    with contextlib.ExitStack() as stack, ThreadPoolExecutor(1, thread_name_prefix="checkpoint-reader") as reader:
        files = {name: stack.enter_context(open(folder / name, "rb")) for name in {p[2] for p in plan}}
        todo, ahead = pieces(), collections.deque()

        def read_ahead() -> None:
            while len(ahead) < 3:
                piece = next(todo, None)
                if piece is None:
                    return
                ahead.append((piece, reader.submit(read, *piece[1:])))

        read_ahead()
        for key, shard, name, box, lo, hi, runs, ranges, direct in plan:
            got = []  # (the range's first byte in the box, its bytes as a uint8 tensor)
            for r0, r1 in ranges:
                size = min(r1 * CHECKSUM_BLOCK_BYTES, box["nbytes"]) - r0 * CHECKSUM_BLOCK_BYTES
                for at in range(0, size, _PIECE_BYTES):  # this range's pieces, in order
                    (staging, buffer, _, _, start, stop), done = ahead.popleft()
                    read_ahead()
                    length = done.result()
                    if reads is not None:
                        reads.append((name, start, stop))
                    if length != stop - start:
                        raise TornCheckpoint(f"{folder / name} is too short for key {key!r}")
                    data, b0 = buffer[at : at + length], r0 + at // CHECKSUM_BLOCK_BYTES
                    _check_blocks(data, b0, _box_crcs(box), f"key {key!r} of {folder / name}")
                if direct is None:
                    got.append((r0 * CHECKSUM_BLOCK_BYTES, staging))
            if direct is not None:
                continue  # the bytes are in place already
            # A run's blocks are contiguous, so it lies inside one range: slice it out (a view, no copy).
            views, k = [], 0
            for a, b in runs:
                while got[k][0] + got[k][1].numel() < b:
                    k += 1
                views.append(got[k][1][a - got[k][0] : b - got[k][0]])
            pin = shard.local.is_cuda  # the overlap, row-major (pinned for a CUDA box: one DMA, queued)
            region = views[0] if len(views) == 1 else torch.cat(views, out=_host_bytes(sum(map(len, views)), pin))
            region = region.view(shard.local.dtype).view([h - lo_ for lo_, h in zip(lo, hi)])
            target = shard.local[tuple(slice(a - o, b - o) for a, b, o in zip(lo, hi, shard.offsets))]
            with torch.no_grad():
                target.copy_(region, non_blocking=pin)  # the pinned host block stays allocated until it is done
    _wait_for_copies(shard.local for _, shard, *_ in plan)  # once, for every queued copy to a device


def _host_bytes(nbytes: int, pin: bool) -> torch.Tensor:
    """An uninitialised uint8 host tensor, page-locked when ``pin`` (the caching host allocator keeps a pinned
    block that a queued copy still reads from allocated until the copy is done)."""
    return torch.empty(nbytes, dtype=torch.uint8, device="cpu", pin_memory=pin)


def _runs(box_off, box_shape, lo, hi) -> list[tuple[int, int]]:
    """Element ranges ``[a, b)`` of a saved box's row-major data that hold the intersection
    ``[lo, hi)`` (global coordinates), maximal and in the intersection's own row-major order."""
    dims = len(box_shape)
    if dims == 0:
        return [(0, 1)]
    rel_lo = [lo[d] - box_off[d] for d in range(dims)]
    ext = [hi[d] - lo[d] for d in range(dims)]
    k = dims - 1  # the dims after k are covered whole, so one run spans dim k's range and everything inside
    while k > 0 and ext[k] == box_shape[k]:
        k -= 1
    strides = [1] * dims
    for d in range(dims - 2, -1, -1):
        strides[d] = strides[d + 1] * box_shape[d + 1]
    length = ext[k] * strides[k]
    runs = []
    for outer in itertools.product(*[range(e) for e in ext[:k]]):
        start = sum((rel_lo[d] + outer[d]) * strides[d] for d in range(k)) + rel_lo[k] * strides[k]
        runs.append((start, start + length))
    return runs


# END SOLUTION


# ---------------------------------------------------------------------------------------------
# ## Task 10.1: sharded, atomic save
# ---------------------------------------------------------------------------------------------


def save_checkpoint(state: dict, directory: str | os.PathLike, step: int, *, group: dist.ProcessGroup | None = None
                    ) -> Path:  # fmt: skip
    """Save ``state`` as step ``step`` under ``directory``, every rank of ``group`` writing only its
    own boxes; collective over ``group``. Returns ``step_directory(directory, step)``.

    Layout and protocol (all ranks call it with the same keys, the same global shapes and dtypes):
      1. every rank writes its boxes' raw bytes (the ones it is the writer of: the lowest group rank
         holding an identical box; non-tensor values are written by every rank for itself), with one
         checksum (e.g. ``zlib.crc32``) per block of at most ``CHECKSUM_BLOCK_BYTES`` bytes of each
         box's data, and the metadata needed to find every box again: key, dtype, global shape,
         offsets, local shape, which file, at which byte, its checksums;
      2. every file is written under a temporary name, flushed and ``os.fsync``-ed, then renamed
         (``os.replace``) to its final name, so a name never points at a half-written file;
      3. group rank 0 commits only after every rank has reported its files complete (their sizes and
         checksums): it writes the global metadata, and last of all ``COMMIT_MARKER``, whose content
         identifies the metadata (e.g. its checksum), so a marker from another save does not commit it.
         Putting the marker in place (its rename) is the save's last change to the filesystem.

    Save does not check that the boxes cover their global tensors: a part nobody saved is found by the
    load that asks for it (a ``KeyError``).

    A rank killed at any moment leaves the previous checkpoint loadable and this one without a valid
    marker (torn); so does a power loss at any moment, given that a file's data is durable only once it is
    fsync-ed (names are durable once renamed: no directory fsync is needed here). A folder of the same
    step left by an earlier save (a torn one, or an older committed one) is removed by group rank 0
    before anyone writes.
    ``ValueError`` (on every rank, before writing anything) for a negative ``step``, a value that is
    neither a Shard, a tensor nor picklable, or a Shard whose box does not fit in its global shape;
    ranks disagreeing on a key's global shape or dtype is a ``ValueError`` naming the key, on every rank,
    found by the plan before any file is written (nothing is committed).
    """
    # BEGIN SOLUTION: Task 10.1 (sharded atomic save)
    me, world, ranks = _group_info(group)
    folder = step_directory(directory, step)
    # Bad input is refused here, on every rank, before any message or file.
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be an int >= 0, got {step!r}")
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict, got {type(state).__name__}")
    objects, boxes = {}, []
    for key, value in state.items():
        if isinstance(value, (Shard, torch.Tensor)):
            continue
        try:
            pickle.dumps(value)
        except Exception as exc:
            raise ValueError(f"state[{key!r}] is neither a Shard, a tensor nor picklable ({exc})") from None
        objects[key] = value
    for key, shard in _iter_tensors(state):
        _check_box(key, shard)
        boxes.append((key, str(shard.local.dtype), shard.global_shape, shard.offsets, tuple(shard.local.shape)))
    # Plan: agree on every key's dtype and global shape, and on who writes which box.
    plans = _all_gather_object(boxes, group, world)
    seen: dict[str, tuple] = {}
    writer: dict[tuple, int] = {}  # (key, offsets, shape) -> the lowest group rank holding it
    for r, rank_boxes in enumerate(plans):
        for key, dtype, shape, offsets, local_shape in rank_boxes:
            if seen.setdefault(key, (dtype, shape)) != (dtype, shape):
                raise ValueError(f"state[{key!r}]: ranks disagree on its dtype/global shape: "
                                 f"{seen[key]} and {(dtype, shape)} (rank {r})")  # fmt: skip
            writer.setdefault((key, offsets, local_shape), r)
    # A leftover folder of this step (a torn save, an older save) goes before anyone writes.
    if me == 0:
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True, exist_ok=True)
    if world > 1:
        dist.barrier(group=group)  # the folder exists and is empty from here on
    # Write this rank's boxes, then its objects, into one file (temporary name, fsync, rename).
    entries: list[dict] = []

    def chunks() -> Iterator:
        """The file's bytes in pieces, each checksummed here while the writer thread writes the last one."""
        offset = 0
        for key, shard in _iter_tensors(state):
            if writer[(key, shard.offsets, tuple(shard.local.shape))] != me:
                continue  # a replica: the lowest group rank holding this box writes it
            data = _as_bytes(shard.local)  # a view of the tensor's bytes (no copy on CPU)
            entry = {"key": key, "dtype": str(shard.local.dtype), "global_shape": list(shard.global_shape),
                     "offsets": list(shard.offsets), "shape": list(shard.local.shape), "start": offset,
                     "nbytes": len(data), "crcs": []}  # fmt: skip
            entries.append(entry)
            for i in range(0, len(data), _PIECE_BYTES):
                entry["crcs"] += _block_crcs(data[i : i + _PIECE_BYTES])
                yield data[i : i + _PIECE_BYTES]
            offset += len(data)
        blob = pickle.dumps(objects)
        entries.append({"key": _OBJECTS, "start": offset, "nbytes": len(blob), "crcs": _block_crcs(blob)})
        yield blob

    _write_atomically(folder / _data_name(me), chunks())
    for entry in entries:
        entry["crcs"] = _pack_crcs(entry["crcs"])
    size = entries[-1]["start"] + entries[-1]["nbytes"]
    report = {"file": _data_name(me), "size": size, "boxes": entries}
    # Commit: group rank 0 checks every rank's report against the files, writes the metadata, then the marker.
    reports = _all_gather_object(report, group, world)
    verdict = None
    if me == 0:
        try:
            for r, rep in enumerate(reports):
                path = folder / rep["file"]
                if not path.is_file() or path.stat().st_size != rep["size"]:
                    raise TornCheckpoint(f"{folder}: rank {r}'s file {rep['file']} is missing or incomplete")
            raw = json.dumps({"step": step, "world_size": world, "block_bytes": CHECKSUM_BLOCK_BYTES,
                              "ranks": reports}).encode()  # fmt: skip
            marker = json.dumps({"step": step, "metadata_crc32": zlib.crc32(raw)}).encode()
            files = ((_METADATA, raw), (COMMIT_MARKER, marker))  # put in place in this order: the marker last
            with ThreadPoolExecutor(2, thread_name_prefix="checkpoint-commit") as pool:  # both fsyncs at once
                temps = list(pool.map(lambda nc: _write_atomically(folder / nc[0], [nc[1]], rename=False), files))
            for (name, _), tmp in zip(files, temps):  # only durable data gets a name
                os.replace(tmp, folder / name)
            _fsync_dir(folder)
        except Exception as exc:  # every rank raises it, not only rank 0
            verdict = f"{type(exc).__name__}: {exc}"
    verdict = _broadcast_object(verdict, group, world, ranks)
    if verdict is not None:
        raise TornCheckpoint(f"the save of step {step} did not commit: {verdict}")
    return folder
    # END SOLUTION


def latest_checkpoint(directory: str | os.PathLike) -> int | None:
    """The newest step under ``directory`` whose checkpoint is committed: a valid ``COMMIT_MARKER``
    matching its metadata, and every rank's file present with the size the metadata records. Torn
    steps are skipped. ``None`` when there is none (or ``directory`` does not exist). Reads files
    only (no checksums of tensor data, no process group)."""
    # BEGIN SOLUTION: Task 10.1 (sharded atomic save)
    root = Path(directory)
    if not root.is_dir():
        return None
    steps = sorted((int(p.name[5:]) for p in root.glob("step_*") if p.name[5:].isdigit()), reverse=True)
    for step in steps:
        try:
            _read_committed(step_directory(root, step))
        except (TornCheckpoint, ValueError, KeyError, TypeError):
            continue
        return step
    return None
    # END SOLUTION


def verify_checkpoint(directory: str | os.PathLike, step: int) -> None:
    """Check step ``step`` completely: marker, metadata, every file, every checksum of every block.
    Returns ``None`` if intact, else raises ``TornCheckpoint`` whose message names what is missing
    or corrupt (e.g. ``"no COMMITTED marker"``, a rank's file, ``"checksum mismatch in key 'w'"``).
    A step that was never saved is torn too ("missing"). Reads files only."""
    # BEGIN SOLUTION: Task 10.1 (sharded atomic save)
    folder = step_directory(directory, step)
    try:
        meta = _read_committed(folder)
    except (ValueError, KeyError, TypeError) as exc:  # a marker that matches unreadable metadata
        raise TornCheckpoint(f"{folder}: unreadable {_METADATA} ({exc})") from None
    for info in meta["ranks"]:
        data = memoryview((folder / info["file"]).read_bytes())
        for box in info["boxes"]:
            what = "the non-tensor values" if box["key"] == _OBJECTS else f"key {box['key']!r}"
            piece = data[box["start"] : box["start"] + box["nbytes"]]
            if len(piece) != box["nbytes"]:
                raise TornCheckpoint(f"{folder}: {info['file']} is too short for {what}")
            _check_blocks(piece, 0, _box_crcs(box), f"{what} of {folder / info['file']}")
    # END SOLUTION


# ---------------------------------------------------------------------------------------------
# ## Task 10.2: load with resharding
# ---------------------------------------------------------------------------------------------


def load_checkpoint(state: dict, directory: str | os.PathLike, step: int | None = None, *,
                    group: dist.ProcessGroup | None = None, reads: list | None = None) -> dict:  # fmt: skip
    """Fill ``state``'s tensors in place from a committed checkpoint (``step=None``: the latest one)
    and return the non-tensor values. Collective over ``group`` (may be any size, not the saving one).

    For every Shard (or tensor, a whole box) in ``state``, the saved boxes of the same key that
    overlap it are found in the metadata and exactly the overlapping bytes are read: for each saved
    box, each maximal run of bytes that is contiguous in that box's row-major data and lies inside the
    requested box, rounded out to whole checksum blocks; the blocks of a saved box's runs merged into
    ranges, each range read once (one ``seek`` + ``read``, or several of consecutive pieces: no byte is read
    twice) and checked against the block checksums (a mismatch is a ``TornCheckpoint`` naming the key).
    Nothing else of the tensor data is read (metadata may be read whole). If ``reads`` is a list, every read
    of tensor data (each ``seek`` + ``read`` above) is appended to it as ``(file name relative to the step folder,
    start byte, stop byte)``; reads of the metadata and of the non-tensor values are not recorded.

    Returns ``{key: value}`` for the non-tensor keys of ``state`` (the saved values of this group
    rank, or of group rank 0 if the checkpoint had fewer ranks), with the saved value in place of the
    one passed; the non-tensor values' checksums are checked before they are unpickled (a
    ``TornCheckpoint`` otherwise: unpickling corrupt bytes is unsafe). ``FileNotFoundError`` if no
    committed checkpoint exists; ``TornCheckpoint`` if ``step`` is not committed; ``KeyError`` naming a
    key of ``state`` the checkpoint does not have, or whose requested box the saved boxes do not cover
    whole (never a partial load); ``ValueError`` naming the key when the global shape or dtype differs
    from the saved one.
    """
    # BEGIN SOLUTION: Task 10.2 (resharding load)
    me, world, ranks = _group_info(group)
    # Group rank 0 picks the step and checks it is committed; every rank gets the same answer.
    answer = None
    if me == 0:
        try:
            chosen = latest_checkpoint(directory) if step is None else step
            if chosen is None:
                raise FileNotFoundError(f"no committed checkpoint under {directory}")
            _read_committed(step_directory(directory, chosen))
            answer = ("ok", chosen)
        except (FileNotFoundError, TornCheckpoint) as exc:
            answer = (type(exc).__name__, str(exc))
    kind, value = _broadcast_object(answer, group, world, ranks)
    if kind != "ok":
        raise (FileNotFoundError if kind == "FileNotFoundError" else TornCheckpoint)(value)
    folder = step_directory(directory, value)
    meta = _read_committed(folder)
    saved: dict[str, list[tuple[str, dict]]] = {}  # key -> [(file, box entry)]
    for info in meta["ranks"]:
        for box in info["boxes"]:
            saved.setdefault(box["key"], []).append((info["file"], box))
    # Plan first: every key's errors come before any byte is read, and the reads can then run ahead.
    plan = []  # (key, shard, file, saved box, overlap lo, overlap hi, byte runs, block ranges)
    for key, shard in _iter_tensors(state):
        if key not in saved:
            raise KeyError(f"state[{key!r}]: the checkpoint of step {value} has no such key")
        first = saved[key][0][1]
        if tuple(first["global_shape"]) != shard.global_shape or _dtype(first["dtype"]) != shard.local.dtype:
            raise ValueError(f"state[{key!r}]: global shape {shard.global_shape} and dtype {shard.local.dtype} differ "
                             f"from the saved {tuple(first['global_shape'])}, {first['dtype']}")  # fmt: skip
        _check_box(key, shard)
        want_lo = shard.offsets
        want_hi = tuple(o + n for o, n in zip(shard.offsets, shard.local.shape))
        covered = 0
        for name, box in saved[key]:
            lo = tuple(max(a, b) for a, b in zip(want_lo, box["offsets"]))
            hi = tuple(min(a, b + n) for a, b, n in zip(want_hi, box["offsets"], box["shape"]))
            if any(h <= lo_ for lo_, h in zip(lo, hi)):
                continue
            itemsize = shard.local.element_size()
            runs = [(a * itemsize, b * itemsize) for a, b in _runs(box["offsets"], box["shape"], lo, hi)]
            # The blocks these runs touch, merged into ranges: each byte is read once, checked once.
            blocks = sorted(
                {i for a, b in runs for i in range(a // CHECKSUM_BLOCK_BYTES, -(-b // CHECKSUM_BLOCK_BYTES))}
            )
            ranges = []
            for i in blocks:
                if ranges and ranges[-1][1] == i:
                    ranges[-1][1] = i + 1
                else:
                    ranges.append([i, i + 1])
            plan.append((key, shard, name, box, lo, hi, runs, ranges, _direct_target(shard, box, lo, hi, runs, ranges)))
            covered += math.prod(h - lo_ for lo_, h in zip(lo, hi))
        if covered != shard.local.numel():
            raise KeyError(f"state[{key!r}]: the checkpoint does not hold all of the box at offsets "
                           f"{shard.offsets} of shape {tuple(shard.local.shape)} ({covered} of "
                           f"{shard.local.numel()} elements)")  # fmt: skip
    _read_plan(plan, folder, reads)
    # Non-tensor values: this group rank's own, or group rank 0's if the checkpoint had fewer ranks.
    wanted = [k for k, v in state.items() if not isinstance(v, (Shard, torch.Tensor))]
    if not wanted:
        return {}
    info = meta["ranks"][me if me < len(meta["ranks"]) else 0]
    box = next(b for b in info["boxes"] if b["key"] == _OBJECTS)
    with open(folder / info["file"], "rb") as f:
        f.seek(box["start"])
        blob = f.read(box["nbytes"])
    _check_blocks(blob, 0, _box_crcs(box), f"the non-tensor values of {folder / info['file']}")
    objects = pickle.loads(blob)
    missing = [k for k in wanted if k not in objects]
    if missing:
        raise KeyError(f"the checkpoint of step {value} has no value for {missing}")
    return {k: objects[k] for k in wanted}
    # END SOLUTION


# ---------------------------------------------------------------------------------------------
# ## Task 10.3: exact resume
# ---------------------------------------------------------------------------------------------


class DistributedSampler:
    """Given: the indices of a dataset of ``num_samples`` examples that this rank reads, epoch by epoch.

    Each epoch shuffles ``range(num_samples)`` with a generator seeded ``seed + epoch`` (the same
    order on every rank), and rank r of ``world_size`` takes positions r, r + world, r + 2 world, ...
    (the tail that does not divide evenly is dropped). ``next_batch(batch_size)`` returns the next
    ``batch_size`` indices of this rank, moving to the next epoch when this one is used up.
    ``state_dict()`` / ``load_state_dict()`` save and restore the position (epoch, index).
    """

    def __init__(self, num_samples: int, rank: int, world_size: int, *, seed: int = 0) -> None:
        self.num_samples, self.rank, self.world_size, self.seed = num_samples, rank, world_size, seed
        self.epoch, self.position = 0, 0  # position: how many of this epoch's indices were handed out

    def _order(self) -> list[int]:
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(self.num_samples, generator=g).tolist()
        per_rank = self.num_samples // self.world_size
        return order[self.rank :: self.world_size][:per_rank]

    def next_batch(self, batch_size: int) -> list[int]:
        """The next ``batch_size`` indices of this rank (an epoch's leftover smaller than a batch is skipped)."""
        order = self._order()
        if self.position + batch_size > len(order):
            self.epoch, self.position = self.epoch + 1, 0
            order = self._order()
        batch = order[self.position : self.position + batch_size]
        self.position += batch_size
        return batch

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position, self.seed = state["epoch"], state["position"], state["seed"]


def capture_training_state(step: int, *, sampler: DistributedSampler | None = None) -> dict:
    """Everything besides parameters and optimizer state that training needs to continue exactly,
    as non-tensor values of a state dict (saved per rank by ``save_checkpoint``):

        "step"          the step counter ``step``
        "rng.python"    ``random.getstate()``
        "rng.torch"     ``torch.get_rng_state()`` (the CPU generator) as ``bytes``
        "rng.cuda"      ``torch.cuda.get_rng_state_all()`` as a list of ``bytes``, when CUDA is
                        initialized (else absent)
        "sampler"       ``sampler.state_dict()`` when a sampler is given (else absent)

    Each rank captures its own generators (they differ between ranks: dropout masks per rank).
    Values are copies: training on does not change them.
    """
    # BEGIN SOLUTION: Task 10.3 (exact resume)
    state = {
        "step": int(step),
        "rng.python": random.getstate(),
        "rng.torch": torch.get_rng_state().numpy().tobytes(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["rng.cuda"] = [s.numpy().tobytes() for s in torch.cuda.get_rng_state_all()]
    if sampler is not None:
        state["sampler"] = copy.deepcopy(sampler.state_dict())
    return state
    # END SOLUTION


def restore_training_state(saved: dict, *, sampler: DistributedSampler | None = None) -> int:
    """Put back what ``capture_training_state`` captured (``saved``: e.g. ``load_checkpoint``'s return
    value): every RNG, the sampler's position (when ``sampler`` is given), and return the step.
    ``KeyError`` naming the missing entry ("rng.torch", "sampler", ...) if ``saved`` lacks one that
    is needed ("rng.cuda" is needed only when CUDA is initialized here)."""
    # BEGIN SOLUTION: Task 10.3 (exact resume)
    needed = ["step", "rng.python", "rng.torch"]
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        needed.append("rng.cuda")
    if sampler is not None:
        needed.append("sampler")
    missing = [k for k in needed if k not in saved]
    if missing:
        raise KeyError(f"the saved training state lacks {', '.join(repr(k) for k in missing)}")
    random.setstate(saved["rng.python"])
    torch.set_rng_state(torch.frombuffer(bytearray(saved["rng.torch"]), dtype=torch.uint8))
    if "rng.cuda" in needed:
        torch.cuda.set_rng_state_all([torch.frombuffer(bytearray(s), dtype=torch.uint8) for s in saved["rng.cuda"]])
    if sampler is not None:
        sampler.load_state_dict(copy.deepcopy(saved["sampler"]))
    return int(saved["step"])
    # END SOLUTION


# BEGIN SOLUTION
_STAGING_ALIGN = 64  # bytes: each staged tensor starts on a cache line (and on any dtype's element size)


class _HostStaging:
    """Host buffers that receive an async save's copies of device tensors, kept from one save to the next.

    A device-to-host copy into pageable memory is synchronous and goes through the driver's small pinned
    bounce buffer, and a fresh host tensor per save costs its page faults too (an H100, 2026-11-27: 198 ms
    to stage 256 MiB, ~1.4 GB/s). Into page-locked (pinned) memory the copy is one DMA at the link's speed,
    and it can be queued without waiting (``non_blocking``). Pinning is slow (it maps and locks every page),
    so buffers are allocated once and reused: ``lease(nbytes)`` hands out a free buffer, replaced by a bigger
    one when it is too small (grown), or a new one when none is free; ``release(buffer)`` takes it back.
    A leased buffer is never handed out again before its release: two saves in flight never share one.
    ``pin=None`` pins when the tensors staged are on CUDA (``pin_memory`` needs it); ``allocations`` counts
    the buffers ever allocated (reuse shows as no new ones)."""

    def __init__(self, pin: bool | None = None) -> None:
        self.pin, self.allocations = pin, 0
        self._free: list[torch.Tensor] = []  # uint8 buffers not leased
        self._lock = threading.Lock()  # leased by the caller of save, released by its background thread

    def lease(self, nbytes: int, *, pin: bool = False) -> torch.Tensor:
        with self._lock:
            buffer = self._free.pop() if self._free else None
        if buffer is None or buffer.numel() < nbytes or buffer.is_pinned() != pin:
            buffer = torch.empty(nbytes, dtype=torch.uint8, device="cpu", pin_memory=pin)
            self.allocations += 1
        return buffer

    def release(self, buffer: torch.Tensor) -> None:
        with self._lock:
            self._free.append(buffer)

    def stage(self, tensors: dict[str, torch.Tensor]) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
        """(the buffer leased, ``{key: a host copy of tensors[key]}``, views of that buffer). The copies from
        CUDA are only queued (on each tensor's current stream): ``_wait_for_copies`` before reading them."""
        if not tensors:
            return None, {}
        sizes = {k: t.numel() * t.element_size() for k, t in tensors.items()}
        total = sum(-(-n // _STAGING_ALIGN) * _STAGING_ALIGN for n in sizes.values())
        pin = self.pin if self.pin is not None else any(t.device.type == "cuda" for t in tensors.values())
        buffer, copies, at = self.lease(total, pin=pin), {}, 0
        try:
            for key, t in tensors.items():
                view = buffer[at : at + sizes[key]].view(t.dtype).view(t.shape)
                view.copy_(t.detach(), non_blocking=pin)  # queued on the stream: no wait per tensor
                copies[key], at = view, at + -(-sizes[key] // _STAGING_ALIGN) * _STAGING_ALIGN
        except BaseException:
            self.release(buffer)
            raise
        return buffer, copies


def _pinned_staging(t: torch.Tensor) -> bool:
    """Whether an async save stages ``t`` through ``_HostStaging`` (a CUDA tensor; a CPU one is copied as it is)."""
    return t.is_cuda


def _wait_for_copies(tensors: Iterable[torch.Tensor]) -> None:
    """One wait for every queued copy to or from the CUDA devices of ``tensors``: an event recorded on each
    device's current stream (after the copies, in stream order), then the host waits for it once."""
    for device in {t.device for t in tensors if t.device.type == "cuda"}:
        done = torch.cuda.Event()
        done.record(torch.cuda.current_stream(device))
        done.synchronize()


# END SOLUTION


# ---------------------------------------------------------------------------------------------
# ## Task 10.4: asynchronous checkpointing
# ---------------------------------------------------------------------------------------------


class AsyncCheckpointer:
    """Save checkpoints in the background: ``save`` blocks only while the state is staged (every
    tensor copied off the training tensors, into CPU memory), then a background thread writes it.

    ``save(state, step)`` first waits for the previous save to finish (one save in flight at a time)
    and re-raises its error, then stages ``state`` (``Shard``s get a copied ``local``; non-tensor
    values a deep copy), starts the write in a thread, and returns: the caller may change the
    training tensors at once, the checkpoint holds the values at the call. The write is
    ``save_checkpoint`` over the group given at construction; its collectives run in the
    background thread, on a process group of its own, so they never mix with training's messages:
    create it in ``__init__`` with ``dist.new_group(<group's global ranks>,
    use_local_synchronization=True)``, which only the ranks of ``group`` call (every rank of ``group``
    constructs its checkpointer; the other ranks need not). On GPUs a new thread starts on ``cuda:0``:
    the thread first sets the device that was current in the caller of ``save``
    (``torch.cuda.set_device``), so its object collectives (NCCL) use this rank's GPU.
    ``wait()`` blocks until the save in flight is committed, re-raises its error (an error of the
    background save is raised by the next ``wait()`` or ``save``), and returns its step folder
    (``None`` if nothing was in flight). ``close()`` waits.
    """

    def __init__(self, directory: str | os.PathLike, *, group: dist.ProcessGroup | None = None) -> None:
        # BEGIN SOLUTION: Task 10.4 (async save)
        self.directory = Path(directory)
        _, world, ranks = _group_info(group)
        # The background thread's collectives get a group of their own (new_group is collective).
        self._group = dist.new_group(ranks, use_local_synchronization=True) if world > 1 else group
        self._thread: threading.Thread | None = None
        self._result: Path | None = None
        self._error: BaseException | None = None
        self._staging = _HostStaging()  # host buffers for device tensors, kept between saves
        # END SOLUTION

    def save(self, state: dict, step: int) -> None:
        """Stage ``state`` (blocking), then write it as ``step`` in the background."""
        # BEGIN SOLUTION: Task 10.4 (async save)
        self.wait()  # one save in flight: the previous one first (and its error)
        # Device tensors first: their copies into the pinned staging buffer are queued at once and run while this
        # thread copies the CPU tensors and the values; one wait for all of them at the end.
        tensors = {k: (v.local if isinstance(v, Shard) else v) for k, v in state.items()
                   if isinstance(v, (Shard, torch.Tensor))}  # fmt: skip
        buffer, copies = self._staging.stage({k: t for k, t in tensors.items() if _pinned_staging(t)})
        try:
            staged = {}  # the blocking part: copies of everything, off the training tensors
            for key, value in state.items():
                if key in copies:  # a device tensor: its copy in the staging buffer
                    local = copies[key]
                    staged[key] = Shard(local, value.global_shape, value.offsets) if isinstance(value, Shard) else local
                elif isinstance(value, Shard):
                    staged[key] = Shard(value.local.detach().to("cpu", copy=True), value.global_shape, value.offsets)
                elif isinstance(value, torch.Tensor):
                    staged[key] = value.detach().to("cpu", copy=True)
                else:
                    staged[key] = copy.deepcopy(value)
            _wait_for_copies(tensors[k] for k in copies)  # the training tensors may change from here on
        except BaseException:
            if buffer is not None:
                self._staging.release(buffer)
            raise
        self._result, self._error = None, None
        # A new thread starts on cuda:0: give it this rank's device (NCCL's object collectives use it).
        device = torch.cuda.current_device() if torch.cuda.is_available() and torch.cuda.is_initialized() else None

        def write() -> None:
            try:
                if device is not None:
                    torch.cuda.set_device(device)
                self._result = save_checkpoint(staged, self.directory, step, group=self._group)
            except BaseException as exc:  # handed to the caller by wait()
                self._error = exc
            finally:
                if buffer is not None:  # written: the next save may stage into it
                    self._staging.release(buffer)

        self._thread = threading.Thread(target=write, name=f"checkpoint-step-{step}", daemon=True)
        self._thread.start()
        # END SOLUTION

    def wait(self) -> Path | None:
        """Block until the save in flight is committed; its step folder, or None."""
        # BEGIN SOLUTION: Task 10.4 (async save)
        if self._thread is None:
            return None
        self._thread.join()
        self._thread = None
        error, self._error = self._error, None
        if error is not None:
            raise error
        return self._result
        # END SOLUTION

    def close(self) -> None:
        """``wait()``, then release the background thread."""
        self.wait()
        # BEGIN SOLUTION
        self._staging = _HostStaging()  # the pinned buffers go back to the system
        # END SOLUTION


# ---------------------------------------------------------------------------------------------
# Given: state dicts of the kit's parts (no communication; they read shapes and group ranks only)
# ---------------------------------------------------------------------------------------------


def _group_rank_size(group) -> tuple[int, int]:
    return dist.get_rank(group), dist.get_world_size(group)


def module_state(module: nn.Module, *, prefix: str = "model.") -> dict[str, Shard]:
    """Every parameter and buffer of a model held whole on each rank (plain, DDP, ZeRO-1/2), as
    whole-box Shards keyed ``prefix + name`` (the names of ``module.state_dict()``); ``local`` is the
    tensor itself, so loading writes into the model."""
    return {prefix + k: Shard(t.detach(), tuple(t.shape), (0,) * t.dim())
            for k, t in module.state_dict(keep_vars=True).items()}  # fmt: skip


def fsdp_state(model: nn.Module, *, group: dist.ProcessGroup | None = None, prefix: str = "model.") -> dict[str, Shard]:
    """An ``FSDP`` model's state (``model.module``'s names): each ``nn.Linear``/``nn.Embedding``
    weight, which FSDP keeps as a flat shard (chunk ``rank`` of the flattened weight zero-padded to a
    multiple of N), as a box of the flattened weight: global shape ``(numel,)``, offset
    ``rank * chunk``, ``local`` = the shard without its padding (a view: loading writes into it).
    These boxes depend on N only through the offsets, so a checkpoint saved at N loads at any N'.
    Other parameters and buffers are whole boxes, as in ``module_state``."""
    rank, world = _group_rank_size(group)
    inner = model.module
    sharded: dict[int, int] = {}  # id(shard parameter) -> numel of the full weight
    for layer in inner.modules():
        if isinstance(layer, nn.Linear):
            sharded[id(layer.weight)] = layer.in_features * layer.out_features
        elif isinstance(layer, nn.Embedding):
            sharded[id(layer.weight)] = layer.num_embeddings * layer.embedding_dim
    out = {}
    for key, t in inner.state_dict(keep_vars=True).items():
        numel = sharded.get(id(t))
        if numel is None:
            out[prefix + key] = Shard(t.detach(), tuple(t.shape), (0,) * t.dim())
            continue
        chunk = -(-numel // world)
        start, stop = min(rank * chunk, numel), min((rank + 1) * chunk, numel)
        out[prefix + key] = Shard(t.detach()[: stop - start], (numel,), (start,))
    return out


def tensor_parallel_state(module: nn.Module, *, group: dist.ProcessGroup | None = None,
                          prefix: str = "model.") -> dict[str, Shard]:  # fmt: skip
    """A model holding ``ColumnParallelLinear``/``RowParallelLinear`` layers (e.g. ``TensorParallelMLP``,
    a ``MeshTrainer``'s stage), tensor-parallel over ``group``: a column layer's weight and bias are
    the rows ``r*out/T : (r+1)*out/T`` of the dense ones, a row layer's weight the columns
    ``r*in/T : (r+1)*in/T`` (its bias whole); everything else is a whole box. Keys are
    ``prefix + name`` with the names of ``module.state_dict()``, so a TP model and its dense twin
    (``models.MLP``) share keys and load into each other."""
    from . import tensor_parallel

    rank, world = _group_rank_size(group)
    boxes: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}  # id(tensor) -> (global shape, offsets)
    for layer in module.modules():
        if isinstance(layer, tensor_parallel.ColumnParallelLinear):
            rows = layer.weight.shape[0]
            boxes[id(layer.weight)] = ((rows * world, layer.weight.shape[1]), (rank * rows, 0))
            if layer.bias is not None:
                boxes[id(layer.bias)] = ((rows * world,), (rank * rows,))
        elif isinstance(layer, tensor_parallel.RowParallelLinear):
            cols = layer.weight.shape[1]
            boxes[id(layer.weight)] = ((layer.weight.shape[0], cols * world), (0, rank * cols))
    out = {}
    for key, t in module.state_dict(keep_vars=True).items():
        shape, offsets = boxes.get(id(t), (tuple(t.shape), (0,) * t.dim()))
        out[prefix + key] = Shard(t.detach(), shape, offsets)
    return out


def optimizer_state(optimizer: torch.optim.Optimizer, params: dict[str, Shard], *,
                    prefix: str = "optim.") -> dict[str, Shard | torch.Tensor]:  # fmt: skip
    """The per-parameter state of ``optimizer`` (e.g. Adam's ``exp_avg``, ``exp_avg_sq``, ``step``),
    boxed like the parameter: for each ``name -> Shard`` of ``params`` (from the helpers above) whose
    ``local`` is (a view of) a parameter that has state in ``optimizer``, every state tensor with the
    parameter's shape becomes a Shard with the same box, keyed ``prefix + name + "." + state_key``,
    and every other state tensor (a 0-d ``step``) a whole tensor under the same kind of key.
    Parameters without state (not owned, under ZeRO) contribute nothing: with ZeRO-1/2 each key is
    saved by its owner only. To load, first ``init_optimizer_state(optimizer)`` so the tensors exist."""
    by_storage = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            if optimizer.state.get(p):
                by_storage[p.untyped_storage().data_ptr()] = p
    out: dict[str, Shard | torch.Tensor] = {}
    for name, shard in params.items():
        local = shard.local
        p = by_storage.get(local.untyped_storage().data_ptr()) if local.numel() or local.dim() else None
        if p is None:
            p = next((q for q in by_storage.values() if q is local), None)
        if p is None:
            continue
        start = local.storage_offset() - p.storage_offset()  # local is a contiguous view of p
        for key, value in optimizer.state[p].items():
            if isinstance(value, torch.Tensor) and value.shape == p.shape and p.dim() > 0:
                view = value.view(-1)[start : start + local.numel()].view(local.shape)
                out[f"{prefix}{name}.{key}"] = Shard(view, shard.global_shape, shard.offsets)
            elif isinstance(value, torch.Tensor):
                out[f"{prefix}{name}.{key}"] = value
    return out


def init_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Create ``optimizer``'s per-parameter state without changing the parameters (one step with zero
    grads and learning rate 0, grads then reset to ``None``), so ``optimizer_state`` has tensors to load
    into. Parameters that already have state are left as they are."""
    params = {id(p) for g in optimizer.param_groups for p in g["params"] if not optimizer.state.get(p)}
    if not params:
        return
    saved_lrs = [g["lr"] for g in optimizer.param_groups]
    saved_grads = {p: p.grad for g in optimizer.param_groups for p in g["params"]}
    for g in optimizer.param_groups:
        g["lr"] = 0.0
    for g in optimizer.param_groups:
        for p in g["params"]:
            p.grad = torch.zeros_like(p) if id(p) in params else None
    optimizer.step()
    for g, lr in zip(optimizer.param_groups, saved_lrs):
        g["lr"] = lr
    for p, grad in saved_grads.items():
        p.grad = grad


def _iter_tensors(state: dict) -> Iterator[tuple[str, Shard]]:
    """``(key, Shard)`` for every tensor entry of ``state`` (a plain tensor becomes a whole box)."""
    for key, value in state.items():
        if isinstance(value, Shard):
            yield key, value
        elif isinstance(value, torch.Tensor):
            yield key, Shard(value, tuple(value.shape), (0,) * value.dim())
