"""The Part 10 checkpoint oracle: seeded global tensors, the boxes each layout gives a rank, the bytes
a resharding load needs, and two rank-side tools that judge a save from the outside.

    from tests.oracles.checkpoint import (CrashInjector, WriteGate, global_tensors, layout, rank_state,
                                          read_budget, unique_bytes)

Layouts (``layout(scheme, rank, world)``), each a dict ``key -> (global_shape, offsets, local_shape)``:
    "fsdp"       every weight flattened and split FSDP-style (chunk ceil(n/N), padding dropped), the
                 biases whole; with Adam state boxed like the weights and a 0-d step per weight
    "tp"         "tp<T>" on N ranks: rank r holds part r % T of a column weight split on dim 0 and of a
                 row weight split on dim 1, as torch.chunk splits (T = N: tensor parallelism alone;
                 T = 1: dense, plain DDP; T < N: N / T data-parallel replicas of each part)
    "zero"       parameters whole everywhere, each Adam state tensor whole on its owner only (ZeRO-1/2)
    "ddp"        everything of "zero", whole, on every rank (where a ZeRO checkpoint loads)

``CrashInjector`` kills (simulates killing) one rank at its j-th file operation of a save without
leaving the others hanging; ``WriteGate`` holds a background thread's file writes until released.
Both work on any implementation: they patch ``open`` and ``os.replace``/``os.rename`` and the process
group's methods, nothing of the implementation. Used by tests/test_checkpoint.py and its hidden
counterpart.
"""

from __future__ import annotations

import builtins
import io
import os
import threading
import time
from pathlib import Path

import torch

from tests.harness import assert_close

BLOCK = 4096  # CHECKSUM_BLOCK_BYTES of the stub: a load may read whole blocks around what it needs

# key -> (shape, dtype) of the model/optimizer tensors every layout is cut from. "big" makes reads
# measurable (48 KiB: several checksum blocks per rank); "tiny" has fewer elements than ranks.
_FSDP_WEIGHTS = {"model.big.weight": ((64, 96), torch.float64), "model.fc.weight": ((7, 5), torch.float64),
                 "model.emb.weight": ((13, 4), torch.bfloat16),
                 "model.tiny.weight": ((3, 1), torch.float64)}  # fmt: skip
_BIASES = {"model.fc.bias": ((7,), torch.float64), "model.counts": ((10,), torch.int64)}
_TP = {"tp.col.weight": ((24, 40), torch.float64), "tp.col.bias": ((24,), torch.float64),
       "tp.row.weight": ((40, 24), torch.float64), "tp.row.bias": ((40,), torch.float64)}  # fmt: skip
_ZERO_PARAMS = {f"model.p{i}": (shape, torch.float64) for i, shape in enumerate([(33, 17), (9,), (5, 6), (200,)])}
OBJECTS = {"step": 7, "config": {"lr": 0.1, "schedule": ["warmup", 3]}}


def specs(scheme: str) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """key -> (global shape, dtype) of a scheme's tensors (FSDP weights flattened)."""
    if scheme == "fsdp":
        out = {k: ((s[0] * s[1],), d) for k, (s, d) in _FSDP_WEIGHTS.items()}
        out |= {f"optim.{k}.exp_avg": v for k, v in out.items() if k != "model.emb.weight"}
        out |= {f"optim.{k}.step": ((), torch.float32) for k in _FSDP_WEIGHTS if k != "model.emb.weight"}
        return out | _BIASES
    if scheme.startswith("tp"):
        return dict(_TP)
    out = dict(_ZERO_PARAMS)
    for k, (s, d) in _ZERO_PARAMS.items():
        out |= {f"optim.{k}.exp_avg": (s, d), f"optim.{k}.exp_avg_sq": (s, d), f"optim.{k}.step": ((), torch.float32)}
    return out


def global_tensors(scheme: str, seed: int = 0) -> dict[str, torch.Tensor]:
    """Seeded global tensors of ``scheme`` (distinct values, so byte patterns are unique in a file)."""
    g = torch.Generator().manual_seed(1000 + seed)
    out = {}
    for key, (shape, dtype) in specs(scheme).items():
        if dtype == torch.int64:
            out[key] = torch.randint(-(2**40), 2**40, shape, generator=g, dtype=torch.int64)
        else:
            out[key] = (torch.randn(shape, generator=g, dtype=torch.float64) + 3).to(dtype)
    return out


def _owner(key: str, world: int) -> int:
    """ZeRO: which rank owns a parameter's optimizer state (by its index, round robin)."""
    index = int(key.split(".")[2][1:]) if key.startswith("optim.") else 0
    return index % world


def _chunk(n: int, t: int, parts: int) -> tuple[int, int]:
    """[start, stop) of part ``t`` of ``n`` split in ``parts`` as torch.chunk (and a DTensor's Shard) does:
    parts of ceil(n / parts), the last ones shorter or empty when ``parts`` does not divide ``n``."""
    size = -(-n // parts)
    return min(t * size, n), min((t + 1) * size, n)


def layout(scheme: str, rank: int, world: int) -> dict[str, tuple[tuple, tuple, tuple]]:
    """``key -> (global_shape, offsets, local_shape)`` of rank ``rank`` of ``world`` in ``scheme``."""
    out = {}
    for key, (shape, _) in specs(scheme).items():
        whole = (shape, (0,) * len(shape), shape)
        if scheme == "fsdp" and len(shape) == 1 and key not in _BIASES:
            (n,) = shape
            chunk = -(-n // world)
            start, stop = min(rank * chunk, n), min((rank + 1) * chunk, n)
            out[key] = (shape, (start,), (stop - start,))
        elif scheme.startswith("tp"):
            tp = int(scheme[2:])
            t = rank % tp  # rank = dp * tp + t: the tp groups are neighbours
            if key in ("tp.col.weight", "tp.col.bias"):
                start, stop = _chunk(shape[0], t, tp)
                out[key] = (shape, (start,) + (0,) * (len(shape) - 1), (stop - start,) + shape[1:])
            elif key == "tp.row.weight":
                start, stop = _chunk(shape[1], t, tp)
                out[key] = (shape, (0, start), (shape[0], stop - start))
            else:
                out[key] = whole
        elif scheme == "zero" and key.startswith("optim."):
            if _owner(key, world) == rank:
                out[key] = whole
        else:
            out[key] = whole
    return out


def split_dim(scheme: str, key: str) -> int | None:
    """The dimension ``scheme`` splits ``key`` along across ranks (as a DTensor ``Shard(dim)``), or
    None for a tensor every rank holds whole (``Replicate()``)."""
    if scheme == "fsdp":
        return 0 if key in _FSDP_WEIGHTS or (key.startswith("optim.") and key.endswith(".exp_avg")) else None
    if scheme.startswith("tp"):
        return {"tp.col.weight": 0, "tp.col.bias": 0, "tp.row.weight": 1}.get(key)
    return None


def rank_state(C, scheme: str, rank: int, world: int, *, seed: int = 0, empty: bool = False,
               device: torch.device | None = None) -> dict:  # fmt: skip
    """The state dict rank ``rank`` passes to save (``empty=False``: its boxes of ``global_tensors``)
    or to load (``empty=True``: zeros in the same boxes), built with the implementation's ``Shard``;
    plus the non-tensor values (and one that differs per rank)."""
    tensors = global_tensors(scheme, seed)
    state = {}
    for key, (shape, offsets, local_shape) in layout(scheme, rank, world).items():
        box = tuple(slice(o, o + n) for o, n in zip(offsets, local_shape))
        local = torch.zeros(local_shape, dtype=tensors[key].dtype, device="cpu") if empty else tensors[key][box].clone()
        local = local.to(device) if device is not None else local
        state[key] = local if local_shape == shape and scheme == "ddp" else C.Shard(local, shape, offsets)
    state |= {k: (0 if empty else v) for k, v in OBJECTS.items()}
    state["whoami"] = None if empty else f"rank {rank} of {world}"
    return state


def expected_boxes(scheme: str, rank: int, world: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """What each of rank ``rank``'s boxes must hold after a load: the global tensors' slices."""
    tensors = global_tensors(scheme, seed)
    return {key: tensors[key][tuple(slice(o, o + n) for o, n in zip(offsets, local))]
            for key, (_, offsets, local) in layout(scheme, rank, world).items()}  # fmt: skip


def unique_bytes(scheme: str, world: int) -> int:
    """Bytes of tensor data a save of ``scheme`` on ``world`` ranks must write: each distinct box once."""
    return sum(_distinct_box_bytes(scheme, world).values())


def metadata_allowance(scheme: str, world: int) -> int:
    """Bytes a step folder may hold beyond the distinct boxes' data: 8 KiB, 512 per box a rank holds (its key,
    shapes, offsets, where it starts) and 16 per 4096-byte checksum block of every distinct box (a CRC32 written
    as up to 10 decimal digits and a separator, in JSON), so it grows with the data as the checksums do."""
    boxes = sum(len(layout(scheme, r, world)) for r in range(world))
    return allowance(list(_distinct_box_bytes(scheme, world).values()), boxes)


def allowance(box_bytes: list[int], boxes_held: int) -> int:
    """``metadata_allowance`` of any state: the distinct boxes' sizes, and how many boxes all ranks hold."""
    return 8192 + 512 * boxes_held + 16 * sum(-(-n // BLOCK) for n in box_bytes)


def _distinct_box_bytes(scheme: str, world: int) -> dict[tuple, int]:
    """(key, offsets, local shape) -> bytes of each distinct box a save on ``world`` ranks writes."""
    tensors, boxes = global_tensors(scheme), {}
    for r in range(world):
        for key, (_, offsets, local) in layout(scheme, r, world).items():
            boxes[(key, offsets, local)] = torch.Size(local).numel() * tensors[key].element_size()
    return boxes


def _saved_boxes(scheme: str, world: int) -> dict[str, list[tuple[tuple, tuple]]]:
    """key -> the distinct boxes (offsets, shape) a save on ``world`` ranks writes."""
    out: dict[str, list] = {}
    for r in range(world):
        for key, (_, offsets, local) in layout(scheme, r, world).items():
            if (offsets, local) not in out.setdefault(key, []):
                out[key].append((offsets, local))
    return out


def read_budget(saved_scheme: str, saved_world: int, load_scheme: str, rank: int, world: int) -> tuple[int, int]:
    """(bytes rank ``rank`` of ``world`` needs, bytes it may read at most) when loading ``load_scheme``
    from a checkpoint of ``saved_scheme`` on ``saved_world`` ranks: the needed bytes, and every
    checksum block (``BLOCK`` bytes from each saved box's first byte) that holds a needed byte."""
    needed = allowed = 0
    saved = _saved_boxes(saved_scheme, saved_world)
    tensors = global_tensors(saved_scheme)
    for key, (_, offsets, local) in layout(load_scheme, rank, world).items():
        size = tensors[key].element_size()
        needed += torch.Size(local).numel() * size
        for s_off, s_shape in saved[key]:
            lo = [max(a, b) for a, b in zip(offsets, s_off)]
            hi = [min(a + n, b + m) for a, n, b, m in zip(offsets, local, s_off, s_shape)]
            if any(h <= lo_ for lo_, h in zip(lo, hi)):
                continue
            index = torch.arange(torch.Size(s_shape).numel()).view(s_shape)
            index = index[tuple(slice(a - o, b - o) for a, b, o in zip(lo, hi, s_off))].reshape(-1)
            blocks = torch.cat([index * size // BLOCK, (index * size + size - 1) // BLOCK]).unique()
            total = torch.Size(s_shape).numel() * size
            allowed += sum(min(BLOCK, total - int(b) * BLOCK) for b in blocks)
    return needed, allowed


def check_reads(reads: list, folder: Path) -> str | None:
    """A problem with recorded reads ``(file, start, stop)`` of one rank, or None: each read lies in an
    existing file of the step folder, and no byte is read twice."""
    by_file: dict[str, list] = {}
    for read in reads:
        if not (isinstance(read, tuple) and len(read) == 3):
            return f"a read recorded as {read!r}, not (file, start, stop)"
        name, start, stop = read
        path = folder / name
        if not path.is_file():
            return f"a read of {name!r}, which is not a file of {folder}"
        if not 0 <= start < stop <= path.stat().st_size:
            return f"a read of bytes [{start}, {stop}) of {name!r} ({path.stat().st_size} bytes)"
        by_file.setdefault(name, []).append((start, stop))
    for name, ranges in by_file.items():
        ranges.sort()
        for (_, b0), (a1, b1) in zip(ranges, ranges[1:]):
            if a1 < b0:
                return f"bytes [{a1}, {min(b0, b1)}) of {name!r} read twice"
    return None


# ---------------------------------------------------------------------------------------------
# Rank side: patch file operations and the process group's methods
# ---------------------------------------------------------------------------------------------


class SimulatedCrash(BaseException):
    """Raised where a rank "dies" (a BaseException: an ``except Exception`` in the code under test
    does not catch it, as it would not catch a SIGKILL)."""


_PG_METHODS = ["allreduce", "allreduce_coalesced", "allgather", "allgather_coalesced", "_allgather_base",
               "allgather_into_tensor_coalesced", "reduce", "reduce_scatter", "_reduce_scatter_base",
               "reduce_scatter_tensor_coalesced", "broadcast", "alltoall", "alltoall_base", "barrier",
               "monitored_barrier", "gather", "scatter", "send", "recv"]  # fmt: skip


class WatchedFile:
    """A file object opened for writing, standing in for the real one: everything but ``write`` (which a
    subclass watches) goes to the real file, ``with`` and iteration included. Used by the crash injector here
    and by the power-loss recorder (tests/oracles/power_loss.py)."""

    def __init__(self, f) -> None:
        self._f = f

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._f.__exit__(*exc)

    def __iter__(self):
        return iter(self._f)


class _Patches:
    """Attributes set for a while and put back exactly (a class's own entry, not what getattr returns:
    a pybind method read through getattr does not bind ``self`` once set back)."""

    _ABSENT = object()

    def __init__(self) -> None:
        self.saved: list[tuple[object, str, object]] = []

    def set(self, owner, name: str, value) -> None:
        self.saved.append((owner, name, vars(owner).get(name, self._ABSENT)))
        setattr(owner, name, value)

    def undo(self) -> None:
        for owner, name, value in reversed(self.saved):
            if value is self._ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, value)
        self.saved.clear()


class CrashInjector:
    """Count one rank's file operations during a save and kill it before its ``crash_at``-th (0-based):
    a write() of a file opened for writing under ``root`` (the crash writes half of that buffer
    first: a torn write), an open for writing there, an ``os.replace``/``os.rename`` there. Other
    ranks are stopped at the first collective the dead rank never reached, as the processes of a
    job are when one of them dies. With ``crash_at=None`` nothing is killed: ``ops`` counts.

    The ranks meet through files in ``flags`` (a folder every rank sees): before every process-group
    call, a rank says it arrived, and waits until every rank has arrived (then it goes on) or the
    crashed rank has left word that it died before that call (then it raises ``SimulatedCrash``).
    ``renames``: the indices (in ``ops``) of this rank's renames, so a test can kill it just after one.
    """

    def __init__(self, root, flags, rank: int, world: int, crash_rank: int, crash_at: int | None) -> None:
        self.root, self.flags = os.path.abspath(root), Path(flags)
        self.rank, self.world, self.crash_rank, self.crash_at = rank, world, crash_rank, crash_at
        self.ops, self.calls, self.crashed = 0, 0, False
        self.renames: list[int] = []
        self._patches = _Patches()

    def _under_root(self, path) -> bool:
        try:
            return os.path.abspath(os.fspath(path)).startswith(self.root)
        except TypeError:
            return False

    def _op(self) -> None:
        if self.rank == self.crash_rank and self.crash_at is not None and self.ops >= self.crash_at:
            self.crashed = True
            (self.flags / f"crashed_after_{self.calls}").write_text("")
            raise SimulatedCrash(f"rank {self.rank} killed at its file operation {self.ops}")
        self.ops += 1

    def __enter__(self):
        injector = self
        real_open, real_replace, real_rename = builtins.open, os.replace, os.rename

        class File(WatchedFile):
            def write(self, data):
                if injector.rank == injector.crash_rank and injector.crash_at is not None:
                    if injector.ops >= injector.crash_at:
                        view = memoryview(data).cast("B")
                        self._f.write(view[: len(view) // 2])
                        self._f.flush()
                injector._op()
                return self._f.write(data)

        def patched_open(file, mode="r", *args, **kwargs):
            if isinstance(file, int) or not any(c in mode for c in "wax+") or not injector._under_root(file):
                return real_open(file, mode, *args, **kwargs)
            injector._op()
            return File(real_open(file, mode, *args, **kwargs))

        def replace(src, dst, *args, real=real_replace, **kwargs):
            if injector._under_root(dst):
                injector._op()
                injector.renames.append(injector.ops - 1)
            return real(src, dst, *args, **kwargs)

        self._patches.set(builtins, "open", patched_open)
        self._patches.set(io, "open", patched_open)
        self._patches.set(os, "replace", replace)
        self._patches.set(os, "rename", lambda s, d, *a, **k: replace(s, d, *a, real=real_rename, **k))
        from torch._C._distributed_c10d import ProcessGroup

        for name in _PG_METHODS:
            original = vars(ProcessGroup).get(name)
            if original is not None:
                self._patches.set(ProcessGroup, name, self._meeting(original))
        return self

    def _meeting(self, original):
        injector = self

        def call(*args, **kwargs):
            index = injector.calls
            injector.calls += 1
            (injector.flags / f"arrived_{injector.rank}_{index}").write_text("")
            end = time.monotonic() + 30
            while time.monotonic() < end:
                if all((injector.flags / f"arrived_{r}_{index}").exists() for r in range(injector.world)):
                    return original(*args, **kwargs)
                if any(int(p.name.rsplit("_", 1)[1]) <= index for p in injector.flags.glob("crashed_after_*")):
                    raise SimulatedCrash(f"rank {injector.rank} stopped: rank {injector.crash_rank} died")
                time.sleep(0.0005)
            raise TimeoutError("CrashInjector: the ranks never met")

        return call

    def __exit__(self, *exc):
        self._patches.undo()
        return False


class WriteGate:
    """While active, a file opened for writing under ``root`` by any thread but the main one waits
    until ``release()``: the background write of an asynchronous save starts only when the test says."""

    def __init__(self, root) -> None:
        self.root, self.event, self.blocked = os.path.abspath(root), threading.Event(), 0
        self._patches = _Patches()

    def release(self) -> None:
        self.event.set()

    def __enter__(self):
        gate, real_open = self, builtins.open

        def patched_open(file, mode="r", *args, **kwargs):
            if (
                not isinstance(file, int)
                and any(c in mode for c in "wax+")
                and threading.current_thread() is not threading.main_thread()
                and os.path.abspath(os.fspath(file)).startswith(gate.root)
            ):
                gate.blocked += 1
                if not gate.event.wait(timeout=30):
                    raise TimeoutError("WriteGate: never released")
            return real_open(file, mode, *args, **kwargs)

        self._patches.set(builtins, "open", patched_open)
        self._patches.set(io, "open", patched_open)
        return self

    def __exit__(self, *exc):
        self.event.set()
        self._patches.undo()
        return False


def find_pattern(folder: Path, pattern: bytes) -> tuple[Path, int] | None:
    """(file, byte offset) of the first occurrence of ``pattern`` in the files of ``folder``."""
    for path in sorted(folder.iterdir()):
        at = path.read_bytes().find(pattern)
        if at >= 0:
            return path, at
    return None


# -- rank functions and judgments shared by the public and the hidden tests -----------------------------


def local_tensors(state: dict) -> dict:
    return {k: (v.local if hasattr(v, "local") else v) for k, v in state.items() if isinstance(v, torch.Tensor)
            or hasattr(v, "local")}  # fmt: skip


def save_rank(ctx, root: str, scheme: str, step: int, seed: int = 0):
    """Save this rank's boxes of ``scheme``; rank 0 then reports latest_checkpoint and verify_checkpoint."""
    C = ctx.load("checkpoint")
    folder = C.save_checkpoint(
        rank_state(C, scheme, ctx.rank, ctx.world_size, seed=seed, device=ctx.device), root, step
    )
    if ctx.rank != 0:
        return str(folder), None, None
    try:
        C.verify_checkpoint(root, step)
        verified = None
    except C.TornCheckpoint as exc:
        verified = str(exc)
    return str(folder), C.latest_checkpoint(root), verified


def load_rank(ctx, root: str, scheme: str, step: int | None = None):
    """Load this rank's boxes of ``scheme`` (zeros to start with); the boxes, the values, the reads."""
    C = ctx.load("checkpoint")
    state = rank_state(C, scheme, ctx.rank, ctx.world_size, empty=True, device=ctx.device)
    reads: list = []
    values = C.load_checkpoint(state, root, step, reads=reads)
    return local_tensors(state), values, reads


def check_load(outs, saved_scheme, saved_world, load_scheme, world, root, what):
    """Judge ``load_rank``'s results at ``world`` ranks: exact boxes, the right rank's values, reads in budget."""
    for r, (boxes, values, reads) in enumerate(outs):
        for key, want in expected_boxes(load_scheme, r, world).items():
            assert_close(boxes[key], want, rtol=0, atol=0, what=f"{what}: rank {r}, box of {key!r}")
        owner = r if r < saved_world else 0
        assert values["whoami"] == f"rank {owner} of {saved_world}", (
            f"{what}: rank {r} got the non-tensor values of {values['whoami']!r}, expected those of rank {owner}"
        )
        problem = check_reads(reads, root / "step_00000001")
        assert problem is None, f"{what}: rank {r}'s recorded reads: {problem}"
        needed, allowed = read_budget(saved_scheme, saved_world, load_scheme, r, world)
        got = sum(stop - start for _, start, stop in reads)
        assert needed <= got <= allowed, (
            f"{what}: rank {r} read {got} bytes of tensor data; its boxes need {needed}, and with whole "
            f"{4096}-byte checksum blocks at most {allowed}: read only the ranges your boxes need "
            "(and record every read)"
        )


# -- rank functions for one promise each (public tests at the chosen sizes; hidden ones at others) ---------


class HeldSaves:
    """While active, a ``save_checkpoint`` called from any thread but the main one (the write an
    ``AsyncCheckpointer`` starts) waits until ``release()``; ``events`` logs ``("start"|"end", step)``
    in order. Holds the implementation's module function (the docstring promises the write is
    ``save_checkpoint``) and, through ``WriteGate``, any file it opens for writing under ``root``."""

    def __init__(self, C, root) -> None:
        self.C, self.gate, self.events = C, WriteGate(root), []
        self._patches = _Patches()

    def release(self) -> None:
        self.gate.release()

    def __enter__(self):
        held, real = self, self.C.save_checkpoint

        def save_checkpoint(state, directory, step, *args, **kwargs):
            if threading.current_thread() is not threading.main_thread():
                held.gate.event.wait(timeout=30)
            held.events.append(("start", step))
            try:
                return real(state, directory, step, *args, **kwargs)
            finally:
                held.events.append(("end", step))

        self.gate.__enter__()
        self._patches.set(self.C, "save_checkpoint", save_checkpoint)
        return self

    def __exit__(self, *exc):
        self._patches.undo()
        return self.gate.__exit__(*exc)


def _error(call) -> str | None:
    """None, or ``"<ExceptionType>: <message>"`` of what ``call()`` raised."""
    try:
        call()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def files_rank(ctx, root: str, step: int, scheme: str = "fsdp"):
    """What the read-only functions (and a one-rank load of ``step``) say about a folder."""
    C = ctx.load("checkpoint")
    state = rank_state(C, _whole(scheme), 0, 1, empty=True, device=ctx.device)
    return {"latest": C.latest_checkpoint(root), "verify": _error(lambda: C.verify_checkpoint(root, step)),
            "load": _error(lambda: C.load_checkpoint(state, root, step))}  # fmt: skip


def _whole(scheme: str) -> str:
    """The layout that holds every tensor of ``scheme`` whole on one rank."""
    return {"zero": "ddp", "fsdp": "fsdp"}.get(scheme, "tp1")


def sabotaged_commit_rank(ctx, root: str, victim: int):
    """Save step 1; then save step 2 while ``victim`` cuts its first renamed file short after its rename,
    before its next collective or file it opens (at once on one rank), so before any commit could check it. What each
    rank's save of step 2 raised, and rank 0's latest_checkpoint afterwards."""
    C = ctx.load("checkpoint")
    C.save_checkpoint(rank_state(C, "fsdp", ctx.rank, ctx.world_size, seed=1, device=ctx.device), root, 1)
    patches, renamed, real_replace, real_rename, real_open = _Patches(), [], os.replace, os.rename, builtins.open
    under = os.path.abspath(root)

    def cut():
        if renamed and renamed[0] is not None:
            path, renamed[0] = renamed[0], None
            os.truncate(path, os.path.getsize(path) // 2)

    def move(real):
        def call(src, dst, *args, **kwargs):
            real(src, dst, *args, **kwargs)
            if not renamed and os.path.abspath(os.fspath(dst)).startswith(under):
                renamed.append(os.fspath(dst))
                if ctx.world_size == 1:  # no collective to wait for: the commit may follow at once
                    cut()

        return call

    def patched_open(file, mode="r", *args, **kwargs):
        if not isinstance(file, int) and any(c in mode for c in "wax+"):
            cut()
        return real_open(file, mode, *args, **kwargs)

    def meeting(original):
        def call(*args, **kwargs):
            cut()
            return original(*args, **kwargs)

        return call

    if ctx.rank == victim:
        patches.set(os, "replace", move(real_replace))
        patches.set(os, "rename", move(real_rename))
        patches.set(builtins, "open", patched_open)
        patches.set(io, "open", patched_open)
        from torch._C._distributed_c10d import ProcessGroup

        for name in _PG_METHODS:
            if vars(ProcessGroup).get(name) is not None:
                patches.set(ProcessGroup, name, meeting(vars(ProcessGroup)[name]))
    try:
        state = rank_state(C, "fsdp", ctx.rank, ctx.world_size, seed=2, device=ctx.device)
        raised = _error(lambda: C.save_checkpoint(state, root, 2))
    finally:
        patches.undo()
    return raised, bool(renamed), C.latest_checkpoint(root) if ctx.rank == 0 else None


def disagreeing_rank(ctx, root: str, what: str):
    """Every rank saves its rows of key "proj.weight"; the last rank disagrees on its dtype or its global shape."""
    C = ctx.load("checkpoint")
    n, last = ctx.world_size, ctx.rank == ctx.world_size - 1
    dtype = torch.float32 if last and what == "dtype" else torch.float64
    shape = (n + 1, 3) if last and what == "shape" else (n, 3)
    state = {"proj.weight": C.Shard(torch.ones(1, 3, dtype=dtype, device=ctx.device), shape, (ctx.rank, 0)), "step": 1}
    return _error(lambda: C.save_checkpoint(state, root, 1)), C.latest_checkpoint(root)


def partial_save_rank(ctx, root: str):
    """Rank r saves rows [2r, 2r + 2) of a (2N + 2, 3) tensor "proj.weight": its last two rows are nobody's."""
    C = ctx.load("checkpoint")
    g = torch.arange((2 * ctx.world_size + 2) * 3, dtype=torch.float64, device="cpu").view(-1, 3)
    box = g[2 * ctx.rank : 2 * ctx.rank + 2].clone().to(ctx.device)
    C.save_checkpoint({"proj.weight": C.Shard(box, tuple(g.shape), (2 * ctx.rank, 0))}, root, 1)


def partial_load_rank(ctx, root: str, rows: int, total: int):
    """Load rows [0, rows) of "proj.weight" (of ``total`` rows) on one rank: the box, or the error."""
    C = ctx.load("checkpoint")
    box = torch.zeros(rows, 3, dtype=torch.float64, device=ctx.device)
    error = _error(lambda: C.load_checkpoint({"proj.weight": C.Shard(box, (total, 3), (0, 0))}, root, 1))
    return error, box


def replicas_rank(ctx, root: str):
    """Every rank holds "w" whole, ranks >= 1 hold "v" whole; each rank's copy differs (base + rank), so a
    load shows whose copy was written."""
    C = ctx.load("checkpoint")
    w = torch.arange(12, dtype=torch.float64, device=ctx.device).view(3, 4) + 100 * ctx.rank
    state = {"w": w, "step": ctx.rank}
    if ctx.rank >= 1:
        state["v"] = C.Shard(torch.full((5,), float(ctx.rank), device=ctx.device), (5,), (0,))
    C.save_checkpoint(state, root, 1)


def replicas_load_rank(ctx, root: str, with_v: bool):
    C = ctx.load("checkpoint")
    state = {"w": torch.zeros(3, 4, dtype=torch.float64, device=ctx.device)}
    if with_v:
        state["v"] = torch.zeros(5, device=ctx.device)
    C.load_checkpoint(state, root, 1)
    return state


def objects_only_load_rank(ctx, root: str):
    """Load only the non-tensor values: what load_checkpoint records in ``reads``, and the values."""
    C = ctx.load("checkpoint")
    reads: list = []
    values = C.load_checkpoint({"step": None, "whoami": None}, root, 1, reads=reads)
    return reads, values


def corrupt_objects_rank(ctx, root: str):
    """Load this rank's non-tensor values (whose pickled bytes were corrupted): the error, or the values."""
    C = ctx.load("checkpoint")
    try:
        return C.load_checkpoint({"config": None, "whoami": None}, root, 1)
    except C.TornCheckpoint as exc:
        return f"TornCheckpoint: {exc}"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def async_copies_rank(ctx, root: str):
    """An async save of Shards (one of them on the CPU, as a CPU-offloaded state would be), a plain tensor and a
    dict; after save() returns (the write held), all of them change in place; released, the checkpoint must hold
    the values at the save."""
    C = ctx.load("checkpoint")
    ckpt = C.AsyncCheckpointer(root)
    state = rank_state(C, "fsdp", ctx.rank, ctx.world_size, device=ctx.device)
    state["plain"] = torch.arange(10, dtype=torch.float64, device=ctx.device)
    state["host"] = C.Shard(_host_box(ctx.rank), (4 * ctx.world_size,), (4 * ctx.rank,))
    state["sampler"] = {"epoch": 2, "position": 6, "seed": 7}
    with HeldSaves(C, root) as held:
        ckpt.save(state, 1)
        with torch.no_grad():
            state["plain"].add_(1)
            state["host"].local.add_(1)
        state["sampler"]["position"] = 999
        state["config"]["lr"] = -1.0
        held.release()
        ckpt.wait()
    ckpt.close()
    host = C.Shard(torch.zeros(4, dtype=torch.float64, device="cpu"), (4 * ctx.world_size,), (4 * ctx.rank,))
    loaded = {"plain": torch.zeros(10, dtype=torch.float64, device=ctx.device), "host": host, "sampler": None,
              "config": None}  # fmt: skip
    values = C.load_checkpoint(loaded, root, 1)
    return loaded["plain"], values, host.local


def _host_box(rank: int) -> torch.Tensor:
    """This rank's box of a CPU-held tensor of 4 * world_size float64 values: 4 * rank, ..., 4 * rank + 3."""
    return torch.arange(4 * rank, 4 * rank + 4, dtype=torch.float64, device="cpu")


def async_order_rank(ctx, root: str):
    """save(1) held; a timer releases it after 0.3 s; save(2) must not return before save 1 has ended.
    Then a save whose value cannot be pickled: its ValueError from save() or wait(); then a good save."""
    C = ctx.load("checkpoint")
    ckpt = C.AsyncCheckpointer(root)
    with HeldSaves(C, root) as held:
        ckpt.save(rank_state(C, "fsdp", ctx.rank, ctx.world_size, seed=1, device=ctx.device), 1)
        timer = threading.Timer(0.3, held.release)
        timer.start()
        ckpt.save(rank_state(C, "fsdp", ctx.rank, ctx.world_size, seed=2, device=ctx.device), 2)
        at_return = list(held.events)
        timer.join()
        second = ckpt.wait()
    bad = rank_state(C, "fsdp", ctx.rank, ctx.world_size, seed=3, device=ctx.device) | {"f": lambda: 0}
    error = _error(lambda: ckpt.save(bad, 3))
    error = error or _error(ckpt.wait)
    ckpt.save(rank_state(C, "fsdp", ctx.rank, ctx.world_size, seed=4, device=ctx.device), 4)
    after = ckpt.wait()
    ckpt.close()
    return at_return, str(second), error, str(after), C.latest_checkpoint(root)


def async_group_rank(ctx, root: str, split: bool):
    """Every process-group call an async save makes, as (main thread?, on the default group?), and the
    boxes it saved, loaded back. With ``split``, only the ranks of a sub-group (all but the last rank)
    construct a checkpointer and save over it; the last rank does not. Then every rank makes one more
    group over all ranks and all-reduces on it: a checkpointer whose ``new_group`` needed every rank of the
    job leaves the ranks disagreeing on which group that is (the all-reduce hangs)."""
    from torch._C._distributed_c10d import ProcessGroup

    C = ctx.load("checkpoint")
    group, rank, world = None, ctx.rank, ctx.world_size
    if split:
        group = torch.distributed.new_group(list(range(ctx.world_size - 1)))
        world = ctx.world_size - 1
        if ctx.rank == world:  # outside the sub-group: no checkpointer
            everyone = torch.distributed.new_group(list(range(ctx.world_size)))
            torch.distributed.all_reduce(torch.ones(1, device=ctx.device), group=everyone)
            return [], None, None, None
    ckpt = C.AsyncCheckpointer(root, group=group)
    calls, patches = [], _Patches()
    default = torch.distributed.group.WORLD

    def spy(name, original):
        def call(pg, *args, **kwargs):
            calls.append((threading.current_thread() is threading.main_thread(), pg is default, name))
            return original(pg, *args, **kwargs)

        return call

    for name in _PG_METHODS:
        if vars(ProcessGroup).get(name) is not None:
            patches.set(ProcessGroup, name, spy(name, vars(ProcessGroup)[name]))
    try:
        ckpt.save(rank_state(C, "fsdp", rank, world, device=ctx.device), 1)
        ckpt.wait()
    finally:
        patches.undo()
    ckpt.close()
    loaded = rank_state(C, "fsdp", rank, world, empty=True, device=ctx.device)
    C.load_checkpoint(loaded, root, 1, group=group)
    if split:
        everyone = torch.distributed.new_group(list(range(ctx.world_size)))
        torch.distributed.all_reduce(torch.ones(1, device=ctx.device), group=everyone)
    return calls, rank, world, local_tensors(loaded)
