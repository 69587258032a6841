"""A simulated power loss: record what a save does to the filesystem, then rebuild what a disk would hold
had the power gone out after any of those operations (staff and public tests of Part 10, §10.1).

    from tests.oracles.power_loss import check_power_loss      # the whole judgment, in a test
    from tests.oracles.power_loss import FsRecorder, snapshot, merge, crash_states, broken_promises, materialize

Storage engines test crash consistency this way (ALICE, CrashMonkey, SQLite's crash tests): run the
code once, log every operation that changes the filesystem, and replay every prefix of the log with
what was not yet durable thrown away. Here:

    rank side    ``FsRecorder(root)``: while active, every ``open`` for writing, ``os.open`` with O_CREAT,
                 ``os.fsync``/``os.fdatasync``, ``os.replace``/``os.rename``, ``os.mkdir`` (Path.mkdir,
                 os.makedirs), ``os.unlink``/``os.remove``/``os.rmdir`` (shutil.rmtree) and ``write``
                 under ``root`` is logged with a system-wide monotonic clock, so the logs of all ranks
                 (processes on one machine) merge into one order. An fsync logs the file's bytes as they
                 are at that moment in the kernel (read back through /proc/self/fd): what the fsync made
                 durable, whatever Python still buffers.
    parent side  ``snapshot(root)`` before the save, ``merge`` of the ranks' logs, ``crash_states``: the
                 distinct states a power loss can leave, ``materialize`` one into a folder.
    judgment     ``broken_promises`` (no name at a half-written file; the marker in place means everything
                 else is), then, in one rank, latest/verify/load of every state (``check_power_loss``).

The durability rule (handouts/10-failures.md §10.0, "What a power loss keeps"):
  * a file's data is durable only once the file is fsync-ed: at a crash a file holds the bytes it had at
    its last fsync (nothing if it was never fsync-ed; truncating it, ``open(.., "wb")``, is durable at
    once), whatever was written since is lost;
  * names are durable as soon as the call returns, in order: creating, renaming and removing a file or a
    folder (what a journaling filesystem such as ext4 or XFS gives; the handout does not ask for a
    directory fsync, so the tests do not require one, and a directory fsync changes nothing here).
A crash after a ``write`` leaves the same disk as before it, so only fsyncs and name changes give new states.
"""

from __future__ import annotations

import builtins
import io
import os
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from tests.oracles.checkpoint import WatchedFile, _Patches

# -- rank side --------------------------------------------------------------------------------------------


class FsRecorder:
    """Log every filesystem change under ``root`` made by this process (all threads) while active.

    ``log``: a list of plain tuples ``(time_ns, rank, op, *args)`` with paths relative to ``root``:
        ("open", path, inode, truncated, created)   a file opened for writing (new, or truncated, or neither)
        ("write", inode, nbytes)           bytes handed to a file object (not durable by themselves)
        ("fsync", inode, data)             the file's whole content at the fsync, now durable
        ("fsync_dir", path)                a folder fsync-ed (no effect under the rule above)
        ("rename", src, dst)               os.replace / os.rename (a file or a folder)
        ("mkdir", path) ("unlink", path) ("rmdir", path)
    Paths outside ``root`` are not logged (the harness's own files, the store)."""

    def __init__(self, root, rank: int) -> None:
        self.root, self.rank = os.path.realpath(root), rank
        self.log: list[tuple] = []
        self._lock = threading.Lock()
        self._patches = _Patches()

    def _rel(self, path, dir_fd=None) -> str | None:
        """``path`` relative to root, or None when it lies outside (or is not a path)."""
        try:
            path = os.fsdecode(os.fspath(path))
        except TypeError:
            return None
        if dir_fd is not None and not os.path.isabs(path):
            path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
        full = os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(path))), os.path.basename(path))
        if full != self.root and not full.startswith(self.root + os.sep):
            return None
        return os.path.relpath(full, self.root)

    def _add(self, op: str, *args) -> None:
        with self._lock:
            self.log.append((time.monotonic_ns(), self.rank, op, *args))

    def __enter__(self):
        rec = self
        real = {name: getattr(os, name) for name in ("open", "fsync", "fdatasync", "replace", "rename", "mkdir",
                                                      "unlink", "remove", "rmdir")}  # fmt: skip
        real_open = builtins.open

        class File(WatchedFile):
            """A file object opened for writing under root: its writes are logged (by size)."""

            def __init__(self, f, ino: int) -> None:
                super().__init__(f)
                self._ino = ino

            def write(self, data):
                n = self._f.write(data)
                rec._add("write", self._ino, int(n) if n is not None else len(memoryview(data).cast("B")))
                return n

            def writelines(self, lines):
                for line in lines:
                    self.write(line)

        def patched_open(file, mode="r", *args, **kwargs):
            rel = None if isinstance(file, int) or not any(c in mode for c in "wax+") else rec._rel(file)
            if rel is None:
                return real_open(file, mode, *args, **kwargs)
            created = not os.path.exists(file)
            f = real_open(file, mode, *args, **kwargs)
            rec._add("open", rel, os.fstat(f.fileno()).st_ino, "w" in mode, created)
            return File(f, os.fstat(f.fileno()).st_ino)

        def os_open(path, flags, mode=0o777, *, dir_fd=None):
            rel = rec._rel(path, dir_fd) if flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR) else None
            created = rel is not None and not os.path.lexists(os.path.join(rec.root, rel))
            fd = real["open"](path, flags, mode, dir_fd=dir_fd)
            if rel is not None and not stat.S_ISDIR(os.fstat(fd).st_mode):
                rec._add("open", rel, os.fstat(fd).st_ino, bool(flags & os.O_TRUNC), created)
            return fd

        def sync(which):
            def call(fd):
                real[which](fd)
                st = os.fstat(fd)
                rel = rec._rel(os.readlink(f"/proc/self/fd/{fd}"))
                if rel is None:
                    return
                if stat.S_ISDIR(st.st_mode):
                    rec._add("fsync_dir", rel)
                else:  # what the kernel holds now: what this fsync made durable
                    with real_open(f"/proc/self/fd/{fd}", "rb") as f:
                        rec._add("fsync", st.st_ino, f.read())

            return call

        def move(which):
            def call(src, dst, *args, **kwargs):
                s, d = rec._rel(src, kwargs.get("src_dir_fd")), rec._rel(dst, kwargs.get("dst_dir_fd"))
                real[which](src, dst, *args, **kwargs)
                if d is not None:
                    rec._add("rename", s, d)

            return call

        def name_op(which, op):
            def call(path, *args, **kwargs):
                rel = rec._rel(path, kwargs.get("dir_fd"))
                real[which](path, *args, **kwargs)
                if rel is not None:
                    rec._add(op, rel)

            return call

        self._patches.set(builtins, "open", patched_open)
        self._patches.set(io, "open", patched_open)
        self._patches.set(os, "open", os_open)
        self._patches.set(os, "fsync", sync("fsync"))
        self._patches.set(os, "fdatasync", sync("fdatasync"))
        self._patches.set(os, "replace", move("replace"))
        self._patches.set(os, "rename", move("rename"))
        self._patches.set(os, "mkdir", name_op("mkdir", "mkdir"))
        self._patches.set(os, "unlink", name_op("unlink", "unlink"))
        self._patches.set(os, "remove", name_op("remove", "unlink"))
        self._patches.set(os, "rmdir", name_op("rmdir", "rmdir"))
        return self

    def __exit__(self, *exc):
        self._patches.undo()
        return False


# -- parent side ------------------------------------------------------------------------------------------


@dataclass
class Disk:
    """What a disk holds: folders, and per file name its file; per file its durable bytes. A file is
    ``(inode, generation)``: the kernel reuses the inode number of a removed file for a new one."""

    dirs: set = field(default_factory=set)
    names: dict = field(default_factory=dict)  # path -> file
    durable: dict = field(default_factory=dict)  # file -> bytes
    current: dict = field(default_factory=dict)  # inode -> its file now

    def files(self) -> dict[str, bytes]:
        return {p: self.durable.get(i, b"") for p, i in self.names.items()}

    def key(self) -> tuple:
        return tuple(sorted(self.dirs)), tuple(sorted(self.files().items()))

    def apply(self, op: tuple) -> bool:
        """Apply one logged operation; True when what survives a crash changed."""
        kind, args = op[2], op[3:]
        if kind == "open":
            path, ino, truncated, created = args
            if created or ino not in self.current:
                self.current[ino] = (ino, len(self.durable))
            fid = self.current[ino]
            before = (self.names.get(path), self.durable.get(fid))
            self.names[path] = fid
            if truncated or fid not in self.durable:
                self.durable[fid] = b""
            return before != (fid, self.durable[fid])
        if kind == "fsync":
            ino, data = args
            fid = self.current.setdefault(ino, (ino, len(self.durable)))
            changed = self.durable.get(fid) != data
            self.durable[fid] = data
            return changed
        if kind == "rename":
            src, dst = args
            if src is None:  # moved in from outside root: unknown content, not durable
                self.names[dst] = ("outside", dst)
                return True
            if src in self.dirs:
                moved = {p for p in self.dirs if p == src or p.startswith(src + os.sep)}
                self.dirs = (self.dirs - moved) | {dst + p[len(src) :] for p in moved}
                for p in [p for p in self.names if p.startswith(src + os.sep)]:
                    self.names[dst + p[len(src) :]] = self.names.pop(p)
                return True
            if src in self.names:
                self.names[dst] = self.names.pop(src)
            return True
        if kind == "mkdir":
            self.dirs.add(args[0])
            return True
        if kind == "unlink":
            return self.names.pop(args[0], None) is not None
        if kind == "rmdir":
            self.dirs.discard(args[0])
            return True
        return False  # write, fsync_dir: nothing more survives


def snapshot(root) -> Disk:
    """The disk under ``root`` as it is now (taken before the save: all of it durable)."""
    disk, root = Disk(), Path(root)
    if not root.exists():
        return disk
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_dir():
            disk.dirs.add(rel)
        elif path.is_file():
            ino = path.stat().st_ino
            disk.current[ino] = (ino, len(disk.durable))
            disk.names[rel], disk.durable[disk.current[ino]] = disk.current[ino], path.read_bytes()
    return disk


def merge(logs: list[list[tuple]]) -> list[tuple]:
    """Every rank's log in one order (the clock is the machine's, shared by all ranks)."""
    return sorted((op for log in logs for op in log), key=lambda op: (op[0], op[1]))


@dataclass
class CrashState:
    """What survives a power loss after ``ops_done`` operations of the merged log (``after``: the last one)."""

    ops_done: int
    after: tuple | None
    disk: Disk


def describe(op: tuple | None) -> str:
    if op is None:
        return "before the save's first operation"
    kind, args = op[2], op[3:]
    if kind == "open":
        what = f"open({args[0]!r}) for writing"
    elif kind == "fsync":
        what = f"fsync of a file ({len(args[1])} bytes durable)"
    elif kind == "rename":
        what = f"rename {args[0]!r} -> {args[1]!r}"
    else:
        what = f"{kind} {args[0]!r}"
    return f"just after rank {op[1]}'s {what}"


def crash_states(before: Disk, log: list[tuple]) -> list[CrashState]:
    """The distinct disks a power loss during the logged operations can leave, in log order (the first:
    before any operation; the last: after all of them)."""
    disk = _copy(before)
    states = [CrashState(0, None, _copy(disk))]
    seen = {disk.key()}
    for i, op in enumerate(log):
        if disk.apply(op):
            key = disk.key()
            if key not in seen:
                seen.add(key)
                states.append(CrashState(i + 1, op, _copy(disk)))
    return states


def final_disk(before: Disk, log: list[tuple]) -> Disk:
    """The disk after every logged operation, with everything durable that was fsync-ed."""
    disk = _copy(before)
    for op in log:
        disk.apply(op)
    return disk


def finished(before: Disk, log: list[tuple], root) -> Disk:
    """The disk once the save returned: the names of the whole log, each file with the bytes it holds now
    (read back from ``root``, durable or not): what every name must hold once in place."""
    disk, now = final_disk(before, log), snapshot(root).files()
    disk.durable = {fid: now[path] for path, fid in disk.names.items() if path in now}
    disk.names = {path: fid for path, fid in disk.names.items() if path in now}
    return disk


def _copy(disk: Disk) -> Disk:
    return Disk(set(disk.dirs), dict(disk.names), dict(disk.durable), dict(disk.current))


def materialize(disk: Disk, folder) -> Path:
    """Write ``disk`` out under ``folder`` (a new folder): what a restarted job would find."""
    folder = Path(folder)
    folder.mkdir(parents=True)
    for d in sorted(disk.dirs):
        (folder / d).mkdir(parents=True, exist_ok=True)
    for path, data in disk.files().items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(data)
    return folder


# -- the promises a crash must keep, judged on every state -------------------------------------------------


def broken_promises(state: CrashState, after: Disk, step_dir: str, marker: str = "COMMITTED") -> list[str]:
    """What ``state`` shows the save got wrong, judged against ``after`` (the disk once the save returned,
    ``finished``), for the files of ``step_dir`` (§10.1, steps 2 and 3):

    * a name never points at a half-written file: a file of the finished save that is already in place
      (its final inode under its final name) holds its final bytes (data fsync-ed before the rename);
    * the marker is the last change: when the finished save's marker is in place, every file of the finished
      save is in place with its final bytes (the metadata and every rank's data written and durable before)."""
    problems = []
    files = state.disk.files()
    done = {p: i for p, i in after.names.items() if p.startswith(step_dir + os.sep)}
    for path, ino in done.items():
        if state.disk.names.get(path) == ino and files[path] != after.durable[ino]:
            problems.append(
                f"{path} is in place with {len(files[path])} of its {len(after.durable[ino])} bytes durable: a name "
                "must never point at a half-written file (write under a temporary name, flush, os.fsync, and only "
                "then os.replace)"
            )
    committed = os.path.join(step_dir, marker)
    if committed in done and files.get(committed) == after.durable[done[committed]] and not problems:
        for path, ino in sorted(done.items()):
            if state.disk.names.get(path) != ino:
                problems.append(
                    f"the {marker} marker is in place but {path} is not yet: putting the marker in place must be "
                    "the save's last change (every file, the metadata included, renamed into place before it)"
                )
            elif files[path] != after.durable[ino]:
                problems.append(
                    f"the {marker} marker is in place but only {len(files[path])} of {path}'s "
                    f"{len(after.durable[ino])} bytes are durable: fsync every file before the commit"
                )
    return problems


def recorded_save_rank(ctx, root: str, scheme: str, step: int, seed: int, background: bool = False):
    """Save this rank's boxes of ``scheme`` while an ``FsRecorder`` logs every filesystem change (of every
    thread: ``background`` saves through an ``AsyncCheckpointer``); the log."""
    from tests.oracles.checkpoint import rank_state

    C = ctx.load("checkpoint")
    state = rank_state(C, scheme, ctx.rank, ctx.world_size, seed=seed, device=ctx.device)
    ckpt = C.AsyncCheckpointer(root) if background else None
    with FsRecorder(root, ctx.rank) as rec:
        if ckpt is None:
            C.save_checkpoint(state, root, step)
        else:
            ckpt.save(state, step)
            ckpt.wait()
    if ckpt is not None:
        ckpt.close()
    return rec.log


def _load_scheme(scheme: str) -> str:
    """The one-rank layout that loads every tensor of ``scheme`` whole."""
    return {"zero": "ddp", "fsdp": "fsdp"}.get(scheme, "tp1")


def judge_rank(ctx, folders: list[str], scheme: str, step: int, seeds: dict[int, list[int]]):
    """For each crash folder: latest_checkpoint, verify_checkpoint of it and of ``step``, and which of
    the ``seeds`` its step may hold (``{step: [seed, ...]}``) a load of the latest matches (or the first
    difference)."""
    from tests.oracles.checkpoint import expected_boxes, local_tensors, rank_state

    C = ctx.load("checkpoint")
    load = _load_scheme(scheme)
    out = []
    for folder in folders:
        verdict = {"latest": C.latest_checkpoint(folder), "verify": None, "verify_step": None, "load": None}
        try:
            C.verify_checkpoint(folder, step)
        except C.TornCheckpoint as exc:
            verdict["verify_step"] = str(exc) or "TornCheckpoint"
        latest = verdict["latest"]
        if latest is not None:
            try:
                C.verify_checkpoint(folder, latest)
            except C.TornCheckpoint as exc:
                verdict["verify"] = str(exc) or "TornCheckpoint"
            state = rank_state(C, load, 0, 1, empty=True, device=ctx.device)
            try:
                C.load_checkpoint(state, folder)
            except Exception as exc:  # judged in the parent
                verdict["load"] = f"{type(exc).__name__}: {exc}"
            else:
                got, differs = local_tensors(state), []
                for seed in seeds.get(latest, []):
                    want = expected_boxes(load, 0, 1, seed=seed)
                    bad = [k for k in want if not torch.equal(got[k].cpu(), want[k])]
                    if not bad:
                        verdict["seed"] = seed
                        break
                    differs.append(f"seed {seed}: {bad[:3]}")
                else:
                    verdict["load"] = f"loaded values match no save of step {latest} ({'; '.join(differs)})"
        out.append(verdict)
    return out


def check_power_loss(world_size: int, tmp_path: Path, scheme: str, *, every: bool, leftover: bool = False,
                     step: int = 2, background: bool = False) -> int:  # fmt: skip
    """Save step 1 (seed 1), then (``leftover``: a committed step ``step`` of seed 3 left on disk, as by
    an older run) record a save of step ``step`` (seed 2; ``background``: an AsyncCheckpointer's) on
    ``world_size`` ranks; replay a power loss
    after every operation (``every``) or after each rename and at the end, and judge every state: the
    promises of ``broken_promises``, and ``latest_checkpoint`` returns a step committed before the save
    or this one, which verifies and loads exactly the values of one save of that step. Returns the
    number of crash states judged."""
    from tests.harness import run_ranks
    from tests.oracles.checkpoint import save_rank

    root = tmp_path / "ckpt"
    run_ranks(world_size, save_rank, str(root), scheme, 1, 1)
    seeds = {1: [1], step: [2]}
    if leftover:
        run_ranks(world_size, save_rank, str(root), scheme, step, 3)
        seeds[step] = [2, 3]
    before = snapshot(root)
    log = merge(run_ranks(world_size, recorded_save_rank, str(root), scheme, step, 2, background))
    after = finished(before, log, root)
    step_dir = f"step_{step:08d}"
    assert any(op[2] == "rename" for op in log), (
        "the save made no os.replace/os.rename under the checkpoint folder: write every file under a "
        "temporary name, fsync it, then os.replace it to its final name"
    )
    states = crash_states(before, log)
    if not every:  # a few points: after each rename, and the end
        states = [s for s in states if s.after is not None and s.after[2] == "rename"] + [states[-1]]
        states = list({id(s): s for s in states}.values())
    committed = sorted({1, step})
    where = [f"power loss {describe(s.after)} (operation {s.ops_done} of {len(log)}, {world_size} ranks, {scheme})"
             for s in states]  # fmt: skip
    for s, w in zip(states, where):
        problems = broken_promises(s, after, step_dir)
        assert not problems, f"{w}: {problems[0]}"
    folders = [str(materialize(s.disk, tmp_path / f"crash_{i:04d}")) for i, s in enumerate(states)]
    verdicts = run_ranks(1, judge_rank, folders, scheme, step, seeds)[0]
    for w, v in zip(where, verdicts):
        assert v["latest"] in committed, (
            f"{w}: latest_checkpoint returned {v['latest']}, expected one of {committed} (the previous "
            "committed step, or this one once its marker is in place)"
        )
        assert v["verify"] is None, (
            f"{w}: latest_checkpoint returned step {v['latest']}, which fails verify_checkpoint: {v['verify']}"
        )
        assert v["load"] is None, f"{w}: loading the latest checkpoint (step {v['latest']}): {v['load']}"
        if v["latest"] != step:
            assert v["verify_step"] is not None, (
                f"{w}: verify_checkpoint passes step {step}, yet latest_checkpoint skips it (returned {v['latest']})"
            )
    assert verdicts[-1]["latest"] == step, (
        f"after the whole save of step {step} (all of it durable), latest_checkpoint returned {verdicts[-1]['latest']}"
    )
    return len(states)
