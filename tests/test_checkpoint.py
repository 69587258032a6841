"""Part 10: checkpoints that survive failures, ``checkpoint`` (handouts/10-failures.md §10.1-10.4).

    pytest tests/test_checkpoint.py                  # your implementation
    pytest tests/test_checkpoint.py -m task10_2

Ranks save and load the boxes of a layout (FSDP flat shards, DP x TP boxes, ZeRO optimizer state on
its owner) cut from seeded global tensors; the parent knows those tensors and judges every box of
every rank, the bytes on disk, and the byte ranges each rank read against what its boxes need.
Failures are injected from outside the implementation (tests/oracles/checkpoint.py): a rank is
"killed" before its j-th file operation of a save (the others stop at the next collective), a byte
of a shard is flipped on disk, a background write is held until the test lets it go. A simulated
power loss (tests/oracles/power_loss.py) records every fsync and name change of a save on every rank
and rebuilds the disk a crash after each of them leaves (data not fsync-ed is lost). Then one test per
promise: what a commit checks, what verify and load check, what an async save copies and waits for. Exact resume
trains with dropout, Adam and a shuffled sampler, and compares an interrupted run bit for bit.
"""

from __future__ import annotations

import random
import tempfile

import pytest
import torch

from tests.harness import assert_close, run_ranks
from tests.harness.bad_input import (
    BadInput,
    assert_rejected_before_communicating,
    bad_input_params,
    bad_input_rank,
    names_argument,
)
from tests.oracles.checkpoint import (
    OBJECTS,
    CrashInjector,
    SimulatedCrash,
    WriteGate,
    async_copies_rank,
    async_group_rank,
    async_order_rank,
    check_load,
    corrupt_objects_rank,
    disagreeing_rank,
    expected_boxes,
    files_rank,
    find_pattern,
    global_tensors,
    layout,
    load_rank,
    local_tensors,
    metadata_allowance,
    objects_only_load_rank,
    partial_load_rank,
    partial_save_rank,
    rank_state,
    replicas_load_rank,
    replicas_rank,
    sabotaged_commit_rank,
    save_rank,
    split_dim,
    unique_bytes,
)
from tests.oracles.power_loss import check_power_loss


def _other_world_sizes(config, world_size: int) -> list[int]:
    """The other chosen world sizes to reshard to; with one size chosen (``--world-sizes 2``), one rank (two when
    the chosen size is 1): a resharding test always loads at another size than it saved at."""
    sizes = [int(w) for w in str(config.getoption("--world-sizes")).split(",") if w.strip()]
    return [w for w in sizes if w != world_size] or [2 if world_size == 1 else 1]


# -- rank functions ---------------------------------------------------------------------------------


def crash_rank(ctx, root: str, flags: str, crash_rank: int, when: str, older: bool = False):
    """Save step 1 (counting file operations), then (``older``: over a complete save of step 2 with other values,
    seed 3, as an older run left it) step 2 killed on ``crash_rank`` at ``when``; then rank 0 asks latest and
    verify(step 2) and every rank loads the latest checkpoint."""
    C = ctx.load("checkpoint")
    with CrashInjector(root, f"{flags}/count", ctx.rank, ctx.world_size, crash_rank, None) as counter:
        C.save_checkpoint(rank_state(C, "fsdp", ctx.rank, ctx.world_size, seed=1, device=ctx.device), root, 1)
    if older:
        C.save_checkpoint(rank_state(C, "fsdp", ctx.rank, ctx.world_size, seed=3, device=ctx.device), root, 2)
    ops = counter.ops if ctx.rank == crash_rank else 0
    after_rename = counter.renames[0] + 1 if counter.renames else ops  # just after its first rename
    crash_at = {"first": 0, "middle": ops // 2, "last": max(ops - 1, 0), "after-first-rename": after_rename}[when]
    crashed = False
    injector = CrashInjector(root, f"{flags}/crash", ctx.rank, ctx.world_size, crash_rank, crash_at)
    try:
        with injector:
            C.save_checkpoint(rank_state(C, "fsdp", ctx.rank, ctx.world_size, seed=2, device=ctx.device), root, 2)
    except SimulatedCrash:
        crashed = True
    latest = verdict = None
    if ctx.rank == 0:
        latest = C.latest_checkpoint(root)
        try:
            C.verify_checkpoint(root, 2)
        except C.TornCheckpoint as exc:
            verdict = str(exc) or "TornCheckpoint"
    state = rank_state(C, "fsdp", ctx.rank, ctx.world_size, empty=True, device=ctx.device)
    try:
        C.load_checkpoint(state, root)
        loaded = local_tensors(state)
    except Exception as exc:  # judged in the parent, after latest and verify
        loaded = f"{type(exc).__name__}: {exc}"
    return crashed, ops, latest, verdict, loaded


def corrupt_load_rank(ctx, root: str):
    """Every rank loads the whole big weight (which holds the flipped byte); rank 0 also verifies."""
    C = ctx.load("checkpoint")
    out = {}
    if ctx.rank == 0:
        try:
            C.verify_checkpoint(root, 1)
            out["verify"] = None
        except C.TornCheckpoint as exc:
            out["verify"] = str(exc) or "TornCheckpoint"
    n = global_tensors("fsdp")["model.big.weight"].numel()
    state = {"model.big.weight": C.Shard(torch.zeros(n, dtype=torch.float64, device=ctx.device), (n,), (0,))}
    try:
        C.load_checkpoint(state, root, 1)
        out["load"] = None
    except C.TornCheckpoint as exc:
        out["load"] = str(exc) or "TornCheckpoint"
    return out


def dcp_save_rank(ctx, ours: str, theirs: str, schemes: tuple):
    """The same boxes saved by the implementation and by torch.distributed.checkpoint (DTensors)."""
    import torch.distributed.checkpoint as dcp

    C = ctx.load("checkpoint")
    state, dstate = {}, {}
    for scheme in schemes:
        state |= rank_state(C, scheme, ctx.rank, ctx.world_size, device=ctx.device)
        dstate |= _dtensors(ctx, scheme, rank_state(C, scheme, ctx.rank, ctx.world_size, device=ctx.device))
    C.save_checkpoint(state, ours, 1)
    dcp.save(dstate, checkpoint_id=theirs)
    return None


def dcp_load_rank(ctx, ours: str, theirs: str, schemes: tuple):
    """Both checkpoints loaded into this rank's boxes (zeros to start with)."""
    import torch.distributed.checkpoint as dcp

    C = ctx.load("checkpoint")
    state, dstate = {}, {}
    for scheme in schemes:
        state |= rank_state(C, scheme, ctx.rank, ctx.world_size, empty=True, device=ctx.device)
        dstate |= _dtensors(ctx, scheme, rank_state(C, scheme, ctx.rank, ctx.world_size, empty=True, device=ctx.device))
    C.load_checkpoint(state, ours, 1)
    dcp.load(dstate, checkpoint_id=theirs)
    return local_tensors(state), {k: v.to_local() for k, v in dstate.items()}


def _dtensors(ctx, scheme: str, state: dict) -> dict:
    """The tensor boxes of ``state`` as DTensors on a 1-D mesh over WORLD (Shard(d) or Replicate())."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor, Replicate
    from torch.distributed.tensor import Shard as Split

    mesh = DeviceMesh.from_group(torch.distributed.group.WORLD, "cuda" if ctx.backend == "nccl" else "cpu")
    out = {}
    for key, (shape, _, _) in layout(scheme, ctx.rank, ctx.world_size).items():
        dim = split_dim(scheme, key)
        placement = Replicate() if dim is None else Split(dim)
        stride = tuple(int(s) for s in torch.empty(shape, device="meta").stride())
        out[key] = DTensor.from_local(state[key].local, mesh, [placement], run_check=False, shape=torch.Size(shape),
                                      stride=stride)  # fmt: skip
    return out


# -- Task 10.1: sharded, atomic save ----------------------------------------------------------------


@pytest.mark.task10_1
def test_save_writes_each_box_once_and_loads_back_exactly(world_size, tmp_path):
    """Each rank writes its own boxes, replicas once; the step commits, verifies and loads back every box."""
    for scheme in ("fsdp", "tp1"):
        root = tmp_path / scheme
        outs = run_ranks(world_size, save_rank, str(root), scheme, 3)
        folder, latest, verified = outs[0]
        assert all(o[0] == folder for o in outs), f"{scheme}: ranks returned different step folders: {outs}"
        assert latest == 3, f"{scheme}: latest_checkpoint after a committed save of step 3 is {latest}"
        assert verified is None, f"{scheme}: verify_checkpoint rejects a clean save: {verified}"
        on_disk = sum(p.stat().st_size for p in (root / folder.rsplit("/", 1)[1]).rglob("*") if p.is_file())
        allowed = unique_bytes(scheme, world_size) + metadata_allowance(scheme, world_size)
        assert on_disk <= allowed, (
            f"{scheme}: the step folder holds {on_disk} bytes, but the distinct boxes are "
            f"{unique_bytes(scheme, world_size)} bytes (+ at most {allowed - unique_bytes(scheme, world_size)} "
            "of metadata): a box held by several ranks (replicas) must be written once, by the lowest rank"
        )
        for r, (boxes_r, values, _) in enumerate(run_ranks(world_size, load_rank, str(root), scheme, 3)):
            for key, want in expected_boxes(scheme, r, world_size).items():
                assert_close(boxes_r[key], want, rtol=0, atol=0, what=f"{scheme}: rank {r}, box of {key!r}")
            assert values == {**OBJECTS, "whoami": f"rank {r} of {world_size}"}, (
                f"{scheme}: rank {r}'s non-tensor values came back as {values}"
            )


CRASHES = [("first", "first"), ("first", "middle"), ("first", "last"),
           ("last", "first"), ("last", "middle"), ("last", "last")]  # fmt: skip


@pytest.mark.task10_1
@pytest.mark.parametrize("who,when", CRASHES, ids=[f"{w}-rank-{t}-op" for w, t in CRASHES])
def test_a_rank_killed_during_a_save_leaves_the_previous_checkpoint(world_size, tmp_path, who, when):
    """A rank killed at its first, middle or last file operation of a save: the previous step stays the
    latest and loads exactly; the torn one is detected by verify_checkpoint."""
    if who == "last" and world_size == 1:
        pytest.skip("one rank: the first rank is the last")
    rank = 0 if who == "first" else world_size - 1
    (tmp_path / "flags" / "count").mkdir(parents=True)
    (tmp_path / "flags" / "crash").mkdir()
    outs = run_ranks(world_size, crash_rank, str(tmp_path / "ckpt"), str(tmp_path / "flags"), rank, when)
    crashed, ops, latest, verdict, _ = outs[0]
    ops = outs[rank][1]
    assert ops > 0, f"rank {rank} made no file operation the test can see (open() for writing, os.replace)"
    assert outs[rank][0], f"rank {rank} was never killed: its save of step 2 made fewer operations than step 1's"
    where = f"rank {rank} killed before its {when} file operation (of {ops}) of the save of step 2"
    assert latest == 1, (
        f"{where}: latest_checkpoint returned {latest}, expected 1: a save is committed only when every "
        "rank's files are complete, by the commit marker put in place last"
    )
    assert verdict is not None, f"{where}: verify_checkpoint(step 2) did not raise TornCheckpoint"
    for r, out in enumerate(outs):
        assert not isinstance(out[4], str), f"{where}: rank {r} could not load the latest checkpoint: {out[4]}"
        for key, want in expected_boxes("fsdp", r, world_size, seed=1).items():
            assert_close(out[4][key], want, rtol=0, atol=0, what=f"{where}: rank {r} loading the latest, {key!r}")


@pytest.mark.task10_1
def test_a_rank_killed_during_a_save_over_an_older_folder_of_the_step_leaves_a_loadable_checkpoint(
    world_size, tmp_path
):
    """A complete older save of step 2 is on disk when step 2 is saved again, and rank 0 is killed just after its
    first rename: what latest_checkpoint returns verifies and loads exactly one save's values (an older folder of the
    step is removed before anyone writes, so none of its files can commit a mix of old and new ones)."""
    (tmp_path / "flags" / "count").mkdir(parents=True)
    (tmp_path / "flags" / "crash").mkdir()
    outs = run_ranks(world_size, crash_rank, str(tmp_path / "ckpt"), str(tmp_path / "flags"), 0, "after-first-rename",
                     True)  # fmt: skip
    crashed, ops, latest, verdict, _ = outs[0]
    assert crashed, f"rank 0 was never killed: its save of step 2 made no rename (os.replace) of the {ops} operations"
    where = "rank 0 killed just after its first rename, in a save of step 2 over an older complete folder of step 2"
    assert latest in (1, 2), f"{where}: latest_checkpoint returned {latest}, expected 1 (or the older step 2)"
    assert latest == 1 or verdict is None, (
        f"{where}: latest_checkpoint returned step 2, which fails verify_checkpoint ({verdict}): an older folder of "
        "the step must be removed (by rank 0) before anyone writes, or its marker commits a mix of old and new files"
    )
    seed = 1 if latest == 1 else 3  # step 1's values, or the older save's of step 2
    for r, out in enumerate(outs):
        assert not isinstance(out[4], str), f"{where}: rank {r} could not load step {latest}: {out[4]}"
        for key, want in expected_boxes("fsdp", r, world_size, seed=seed).items():
            assert_close(out[4][key], want, rtol=0, atol=0, what=f"{where}: rank {r} loading step {latest}, {key!r}")


@pytest.mark.task10_1
def test_a_power_loss_during_a_save_leaves_a_committed_checkpoint(world_size, tmp_path):
    """A power loss during a save, after each rename (data not fsync-ed is lost): no name points at a half-written
    file, the marker is the last change, and latest_checkpoint returns step 1 or 2, which verifies and loads exactly."""
    check_power_loss(world_size, tmp_path, "fsdp", every=False)


@pytest.mark.task10_1
def test_a_flipped_byte_is_detected_by_verify_and_by_load(world_size, tmp_path):
    """A byte of a saved shard flipped on disk: verify_checkpoint and every load that reads it raise TornCheckpoint."""
    run_ranks(world_size, save_rank, str(tmp_path), "fsdp", 1)
    pattern = global_tensors("fsdp")["model.big.weight"][100:116].numpy().tobytes()
    found = find_pattern(tmp_path / "step_00000001", pattern)
    assert found is not None, "the raw bytes of model.big.weight are not in the step folder (save them uncompressed)"
    path, at = found
    data = bytearray(path.read_bytes())
    data[at + 61] ^= 0x10
    path.write_bytes(bytes(data))
    outs = run_ranks(world_size, corrupt_load_rank, str(tmp_path))
    assert outs[0]["verify"] is not None, "verify_checkpoint passed a checkpoint with a flipped byte"
    for r, out in enumerate(outs):
        assert out["load"] is not None, (
            f"rank {r}: load_checkpoint read the flipped byte without noticing (check the block checksums of "
            "everything you read)"
        )
        assert "model.big.weight" in out["load"], f"rank {r}: the TornCheckpoint should name the key: {out['load']}"


@pytest.mark.task10_1
def test_a_file_cut_short_before_the_commit_fails_the_save_on_every_rank(world_size, tmp_path):
    """A rank's file is cut short after its rename, before the commit: rank 0 checks every rank's reported files
    and sizes, so the save does not commit, and every rank's save_checkpoint raises (the outcome is broadcast)."""
    victim = world_size - 1
    outs = run_ranks(world_size, sabotaged_commit_rank, str(tmp_path), victim)
    assert outs[victim][1], f"rank {victim} renamed no file under the checkpoint folder (os.replace)"
    for r, (raised, _, _) in enumerate(outs):
        assert raised is not None, (
            f"rank {r}: save_checkpoint(step 2) returned although rank {victim}'s file was cut to half its size "
            "before the commit: rank 0 must check every rank's reported files and sizes before it commits, and "
            "a failed commit must raise on every rank (broadcast the outcome)"
        )
    assert outs[0][2] == 1, f"after the failed save of step 2, latest_checkpoint returned {outs[0][2]}, expected 1"


@pytest.mark.task10_1
@pytest.mark.parametrize("what", ["dtype", "shape"])
def test_ranks_disagreeing_on_a_keys_dtype_or_shape_are_rejected(world_size, tmp_path, what):
    """The last rank saves key "proj.weight" with another dtype (or global shape) than the others: a ValueError naming
    it on every rank, and nothing committed."""
    if world_size == 1:
        pytest.skip("one rank cannot disagree with another (needs world size >= 2)")
    for r, (error, latest) in enumerate(run_ranks(world_size, disagreeing_rank, str(tmp_path), what)):
        assert error is not None and error.startswith("ValueError") and names_argument(error, "proj.weight"), (
            f"rank {r}: the last rank gave key 'proj.weight' another {what} than the others; expected a ValueError "
            f"naming 'proj.weight' on every rank (ranks must agree on each key's dtype and global shape), got {error!r}"
        )
        assert latest is None, f"rank {r}: a save the ranks disagreed on committed step {latest}"


@pytest.mark.task10_1
def test_a_marker_from_another_save_of_the_step_does_not_commit_it(world_size, tmp_path):
    """Two saves of step 2 with different values; the first one's COMMITTED marker put in the second's folder:
    its content does not match that metadata, so step 2 is torn (latest is 1, verify and load raise)."""
    a, b = tmp_path / "a", tmp_path / "b"
    run_ranks(world_size, save_rank, str(a), "fsdp", 2, 2)
    run_ranks(world_size, save_rank, str(b), "fsdp", 1, 1)
    run_ranks(world_size, save_rank, str(b), "fsdp", 2, 3)
    marker_a, marker_b = a / "step_00000002" / "COMMITTED", b / "step_00000002" / "COMMITTED"
    assert marker_a.read_bytes() != marker_b.read_bytes(), (
        "two saves of step 2 with different values wrote the same COMMITTED marker: its content must identify "
        "its own save's metadata (e.g. the metadata's CRC32)"
    )
    marker_b.write_bytes(marker_a.read_bytes())
    out = run_ranks(1, files_rank, str(b), 2)[0]
    where = "step 2's folder with the COMMITTED marker of another save of step 2"
    assert out["latest"] == 1, (
        f"{where}: latest_checkpoint returned {out['latest']}, expected 1 (check the marker's content against the "
        "metadata)"
    )
    assert out["verify"] and "TornCheckpoint" in out["verify"], f"{where}: verify_checkpoint(2): {out['verify']}"
    assert out["load"] and "TornCheckpoint" in out["load"], f"{where}: load_checkpoint(step=2): {out['load']}"


@pytest.mark.task10_1
@pytest.mark.parametrize("damage", ["shortened", "removed"])
def test_latest_checkpoint_checks_that_the_data_files_exist_with_their_sizes(world_size, tmp_path, damage):
    """The file holding a weight's bytes in step 2, one byte short (or removed): latest_checkpoint skips step 2."""
    run_ranks(world_size, save_rank, str(tmp_path), "fsdp", 1, 1)
    run_ranks(world_size, save_rank, str(tmp_path), "fsdp", 2, 2)
    pattern = global_tensors("fsdp", 2)["model.big.weight"][:16].numpy().tobytes()
    found = find_pattern(tmp_path / "step_00000002", pattern)
    assert found is not None, "the raw bytes of model.big.weight are not in the step folder (save them uncompressed)"
    path = found[0]
    if damage == "removed":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[:-1])
    out = run_ranks(1, files_rank, str(tmp_path), 2)[0]
    assert out["latest"] == 1, (
        f"step 2's data file {path.name} {damage}: latest_checkpoint returned {out['latest']}, expected 1 (it "
        "checks every rank's file exists with the size the metadata records)"
    )


@pytest.mark.task10_1
def test_verify_checks_every_block_of_every_box_and_the_pickled_values(world_size, tmp_path):
    """A byte flipped in the LAST checksum block of a box, then one in each rank's pickled values: verify_checkpoint
    raises TornCheckpoint for both (it checks every block of every box, and the non-tensor values' blocks)."""
    run_ranks(world_size, save_rank, str(tmp_path), "fsdp", 1)
    folder = tmp_path / "step_00000001"
    pattern = global_tensors("fsdp")["model.big.weight"][-16:].numpy().tobytes()
    found = find_pattern(folder, pattern)
    assert found is not None, "the raw bytes of model.big.weight are not in the step folder (save them uncompressed)"
    path, at = found
    clean = path.read_bytes()
    path.write_bytes(clean[: at + 120] + bytes([clean[at + 120] ^ 0x01]) + clean[at + 121 :])
    out = run_ranks(1, files_rank, str(tmp_path), 1)[0]
    assert out["verify"] and "TornCheckpoint" in out["verify"], (
        "a byte flipped in the last 4096-byte block of a box (the last elements of model.big.weight): "
        f"verify_checkpoint said {out['verify']!r}: check every checksum block of every box, not only the first"
    )
    path.write_bytes(clean)
    assert _corrupt_pickles(folder), "the non-tensor value 'warmup' (in OBJECTS['config']) is not in the step folder"
    out = run_ranks(1, files_rank, str(tmp_path), 1)[0]
    assert out["verify"] and "TornCheckpoint" in out["verify"], (
        f"a byte flipped in the pickled non-tensor values: verify_checkpoint said {out['verify']!r}: the pickled "
        "values have block checksums too, and verify checks them"
    )


def _corrupt_pickles(folder) -> int:
    """Flip the length byte pickle writes before the string 'warmup' in every file of ``folder``; how many."""
    count = 0
    for path in sorted(folder.iterdir()):
        data = bytearray(path.read_bytes())
        at = data.find(b"warmup")
        while at > 0:
            data[at - 1] ^= 0x40
            count += 1
            at = data.find(b"warmup", at + 1)
        path.write_bytes(bytes(data))
    return count


@pytest.mark.task10_2
def test_load_checks_the_pickled_values_before_unpickling_them(world_size, tmp_path):
    """Each rank's pickled non-tensor values corrupted on disk: every rank's load raises TornCheckpoint (their block
    checksums are checked before pickle.loads, which must never run on corrupt bytes)."""
    run_ranks(world_size, save_rank, str(tmp_path), "fsdp", 1)
    assert _corrupt_pickles(tmp_path / "step_00000001"), "the non-tensor value 'warmup' is not in the step folder"
    for r, got in enumerate(run_ranks(world_size, corrupt_objects_rank, str(tmp_path))):
        assert isinstance(got, str) and got.startswith("TornCheckpoint"), (
            f"rank {r}: loading non-tensor values whose pickled bytes are corrupt gave {got!r}, expected "
            "TornCheckpoint: check the values' block checksums before unpickling them"
        )


@pytest.mark.task10_2
def test_a_box_the_checkpoint_does_not_cover_whole_is_a_key_error(world_size, tmp_path):
    """Rank r saved rows [2r, 2r + 2) of "proj.weight", whose last 2 rows nobody saved: loading all of it is a KeyError
    naming it (never a partial load); loading the saved rows works."""
    total = 2 * world_size + 2
    run_ranks(world_size, partial_save_rank, str(tmp_path))
    error, _ = run_ranks(1, partial_load_rank, str(tmp_path), total, total)[0]
    assert error is not None and error.startswith("KeyError") and names_argument(error, "proj.weight"), (
        f"loading rows [0, {total}) of 'proj.weight', of which [{total - 2}, {total}) were never saved: expected a "
        f"KeyError naming 'proj.weight' (the saved boxes do not cover the requested one), got {error!r}"
    )
    error, box = run_ranks(1, partial_load_rank, str(tmp_path), total - 2, total)[0]
    assert error is None, f"loading the saved rows [0, {total - 2}) of 'proj.weight' failed: {error}"
    want = torch.arange(total * 3, dtype=torch.float64).view(-1, 3)[: total - 2]
    assert_close(box, want, rtol=0, atol=0, what=f"rows [0, {total - 2}) of 'proj.weight', saved by {world_size} ranks")


@pytest.mark.task10_1
def test_the_lowest_rank_holding_a_replicated_box_writes_it(world_size, tmp_path):
    """Every rank holds "w" whole and ranks >= 1 hold "v" whole, each copy different: a load finds rank 0's "w" and
    rank 1's "v" (the lowest group rank holding a box writes it)."""
    if world_size == 1:
        pytest.skip("one rank: no replicas (needs world size >= 2)")
    run_ranks(world_size, replicas_rank, str(tmp_path))
    got = run_ranks(1, replicas_load_rank, str(tmp_path), True)[0]
    for key, owner, want in (("w", 0, torch.arange(12, dtype=torch.float64).view(3, 4)), ("v", 1, torch.ones(5))):
        writer = "?" if key == "v" else (got[key][0, 0].item() // 100)
        assert torch.equal(got[key], want), (
            f"the checkpoint holds another rank's copy of {key!r} (rank {writer} of the ranks that hold it?), "
            f"expected rank {owner}'s: the lowest group rank holding a replicated box writes it\n"
            f"got {got[key].tolist()}"
        )


@pytest.mark.task10_2
def test_reads_records_the_reads_of_tensor_data_only(world_size, tmp_path):
    """load_checkpoint(reads=) records the reads of tensor data, not those of the metadata or the non-tensor values:
    loading only non-tensor values records nothing."""
    run_ranks(world_size, save_rank, str(tmp_path), "fsdp", 1)
    for r, (reads, values) in enumerate(run_ranks(world_size, objects_only_load_rank, str(tmp_path))):
        assert values == {"step": OBJECTS["step"], "whoami": f"rank {r} of {world_size}"}, f"rank {r}: {values}"
        assert reads == [], (
            f"rank {r} loaded only non-tensor values and recorded the reads {reads[:3]}: reads= records the reads "
            "of tensor data only (the byte budget counts every recorded read as tensor data)"
        )


# -- Task 10.2: load with resharding ----------------------------------------------------------------


@pytest.mark.task10_2
def test_fsdp_checkpoint_loads_at_other_world_sizes_reading_only_what_each_rank_needs(world_size, tmp_path, request):
    """FSDP shards saved on N ranks load on N' ranks exactly, each rank reading only its own byte ranges."""
    run_ranks(world_size, save_rank, str(tmp_path), "fsdp", 1)
    for new in _other_world_sizes(request.config, world_size):
        outs = run_ranks(new, load_rank, str(tmp_path), "fsdp", None)
        check_load(outs, "fsdp", world_size, "fsdp", new, tmp_path, f"FSDP {world_size} -> {new} ranks")


@pytest.mark.task10_2
def test_dp_x_tp_checkpoint_loads_into_tensor_parallelism_alone(world_size, tmp_path, request):
    """DP x TP boxes (column and row shards, replicas written once) load into TP alone on other world sizes."""
    tp = max(world_size // 2, 1)
    run_ranks(world_size, save_rank, str(tmp_path), f"tp{tp}", 1)
    for new in _other_world_sizes(request.config, world_size):
        outs = run_ranks(new, load_rank, str(tmp_path), f"tp{new}", None)
        what = f"dp {world_size // tp} x tp {tp} -> tp {new}"
        check_load(outs, f"tp{tp}", world_size, f"tp{new}", new, tmp_path, what)


@pytest.mark.task10_2
def test_zero_optimizer_shards_load_into_plain_ddp(world_size, tmp_path, request):
    """ZeRO optimizer state (each tensor on its owner only) loads whole on every rank of a plain DDP job."""
    run_ranks(world_size, save_rank, str(tmp_path), "zero", 1)
    for new in sorted({world_size, *_other_world_sizes(request.config, world_size)}):
        outs = run_ranks(new, load_rank, str(tmp_path), "ddp", None)
        check_load(outs, "zero", world_size, "ddp", new, tmp_path, f"ZeRO on {world_size} -> DDP on {new} ranks")


@pytest.mark.task10_2
def test_round_trip_and_resharding_match_torch_distributed_checkpoint(world_size, tmp_path, request):
    """The same boxes through torch.distributed.checkpoint (DTensors) agree after a round trip and resharding."""
    schemes = ("fsdp", f"tp{world_size}")
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "dcp")
    run_ranks(world_size, dcp_save_rank, ours, theirs, schemes)
    for new in sorted({world_size, _other_world_sizes(request.config, world_size)[0]}):
        load_schemes = ("fsdp", f"tp{new}")
        for r, (mine, dcps) in enumerate(run_ranks(new, dcp_load_rank, ours, theirs, load_schemes)):
            for key in dcps:
                what = f"{world_size} -> {new} ranks, rank {r}, {key!r}"
                assert_close(mine[key], dcps[key], rtol=0, atol=0, what=f"{what}: yours vs torch DCP")


# -- Task 10.3: exact resume ------------------------------------------------------------------------

RESUME_STEPS, RESUME_AT, SAMPLES, BATCH = 6, 3, 24, 3


def _train(ctx, C, model, opt, sampler, data, steps):
    for _ in range(steps):
        index = torch.tensor(sampler.next_batch(BATCH), device="cpu")
        x, y = data[0][index].to(ctx.device), data[1][index].to(ctx.device)
        scale = 1.0 + random.random()  # python's RNG in the loss: it must resume too
        loss = scale * torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        if ctx.world_size > 1:
            for p in model.parameters():
                torch.distributed.all_reduce(p.grad)
                p.grad /= ctx.world_size
        opt.step()


def _fresh(ctx, C, seed):
    torch.manual_seed(seed)  # the same initial model on every rank (as after DDP's broadcast)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 2))
    model = model.to(dtype=torch.float64, device=ctx.device)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    torch.manual_seed(1000 * seed + ctx.rank)  # dropout differs between ranks
    random.seed(2000 * seed + ctx.rank)
    sampler = C.DistributedSampler(SAMPLES, ctx.rank, ctx.world_size, seed=7)
    return model, opt, sampler


def _observe(model, opt, sampler):
    return {
        "parameters": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "optimizer state": {f"{i}.{k}": v.clone() for i, s in enumerate(opt.state.values()) for k, v in s.items()},
        "torch RNG": torch.get_rng_state(),
        "python RNG": random.getstate(),
        "sampler position": sampler.state_dict(),
    }


def resume_rank(ctx, root: str):
    """Uninterrupted: RESUME_STEPS steps. Interrupted: RESUME_AT steps, save, scramble everything
    (a new process), load, restore, the remaining steps. Both end states, as observed by the test."""
    C = ctx.load("checkpoint")
    g = torch.Generator().manual_seed(5)
    data = (
        torch.randn(SAMPLES, 4, generator=g, dtype=torch.float64),
        torch.randn(SAMPLES, 2, generator=g, dtype=torch.float64),
    )
    model, opt, sampler = _fresh(ctx, C, 1)
    _train(ctx, C, model, opt, sampler, data, RESUME_STEPS)
    straight = _observe(model, opt, sampler)

    model, opt, sampler = _fresh(ctx, C, 1)
    _train(ctx, C, model, opt, sampler, data, RESUME_AT)
    params = C.module_state(model)
    state = params | C.optimizer_state(opt, params) | C.capture_training_state(RESUME_AT, sampler=sampler)
    C.save_checkpoint(state, root, RESUME_AT)

    model, opt, sampler = _fresh(ctx, C, 2)  # "a new process": other weights, other RNG, sampler at 0
    C.init_optimizer_state(opt)
    params = C.module_state(model)
    state = params | C.optimizer_state(opt, params) | C.capture_training_state(0, sampler=sampler)
    step = C.restore_training_state(C.load_checkpoint(state, root), sampler=sampler)
    _train(ctx, C, model, opt, sampler, data, RESUME_STEPS - step)
    return step, straight, _observe(model, opt, sampler)


@pytest.mark.task10_3
def test_resumed_training_equals_uninterrupted_training_bit_for_bit(world_size, tmp_path):
    """Interrupted after step k and resumed: parameters, optimizer state, every rank's RNGs, the sampler position
    and the step equal the uninterrupted run's exactly."""
    outs = run_ranks(world_size, resume_rank, str(tmp_path))
    for r, (step, straight, resumed) in enumerate(outs):  # every rank's pieces first: they explain the rest
        assert step == RESUME_AT, f"rank {r}: restore_training_state returned step {step}, expected {RESUME_AT}"
        for piece in ("torch RNG", "python RNG", "sampler position"):
            same = (
                torch.equal(straight[piece], resumed[piece])
                if piece == "torch RNG"
                else straight[piece] == resumed[piece]
            )
            assert same, (
                f"rank {r}: the {piece} after resuming differs from the uninterrupted run's "
                "(not saved, or not restored?)"
            )
    for r, (_, straight, resumed) in enumerate(outs):
        for piece in ("parameters", "optimizer state"):
            for key, want in straight[piece].items():
                assert_close(
                    resumed[piece][key], want, rtol=0, atol=0, what=f"rank {r}, {piece} {key!r} after resuming"
                )


def missing_piece_rank(ctx):
    C = ctx.load("checkpoint")
    sampler = C.DistributedSampler(8, ctx.rank, ctx.world_size)
    saved = C.capture_training_state(4, sampler=sampler)
    messages = {}
    for piece in ("rng.torch", "rng.python", "sampler", "step"):
        try:
            C.restore_training_state({k: v for k, v in saved.items() if k != piece}, sampler=sampler)
            messages[piece] = None
        except KeyError as exc:
            messages[piece] = str(exc)
    return sorted(saved), messages


@pytest.mark.task10_3
def test_a_missing_piece_of_the_training_state_is_named(world_size):
    """capture_training_state holds step, RNGs and sampler; restoring without one raises KeyError naming it."""
    keys, messages = run_ranks(world_size, missing_piece_rank)[0]
    assert {"step", "rng.python", "rng.torch", "sampler"} <= set(keys), f"capture_training_state holds only {keys}"
    for piece, message in messages.items():
        assert message is not None and piece in message, (
            f"restore_training_state without {piece!r}: expected a KeyError naming it, got {message!r}"
        )


# -- Task 10.4: asynchronous checkpointing ----------------------------------------------------------


def async_rank(ctx, root: str):
    """Save asynchronously with the background writes held; change the tensors as the next step would;
    release; the checkpoint must hold the values at the save."""
    C = ctx.load("checkpoint")
    ckpt = C.AsyncCheckpointer(root)
    state = rank_state(C, "fsdp", ctx.rank, ctx.world_size, device=ctx.device)
    with WriteGate(root) as gate:
        ckpt.save(state, 1)
        committed_before_release = C.latest_checkpoint(root)
        with torch.no_grad():
            for value in state.values():
                if hasattr(value, "local") and value.local.is_floating_point():
                    value.local.add_(1)  # the next training step changes the tensors in place
        gate.release()
        folder = ckpt.wait()
    ckpt.save(rank_state(C, "fsdp", ctx.rank, ctx.world_size, seed=1, device=ctx.device), 2)
    second = ckpt.wait()
    ckpt.close()
    loaded = rank_state(C, "fsdp", ctx.rank, ctx.world_size, empty=True, device=ctx.device)
    C.load_checkpoint(loaded, root, 1)
    return committed_before_release, str(folder), str(second), C.latest_checkpoint(root), local_tensors(loaded)


@pytest.mark.task10_4
def test_async_save_returns_before_writing_and_keeps_the_state_of_its_step(world_size, tmp_path):
    """AsyncCheckpointer.save returns once staged (nothing committed yet); the tensors change after it; the
    checkpoint still holds the values at the save."""
    outs = run_ranks(world_size, async_rank, str(tmp_path))
    for r, (before, folder, second, latest, loaded) in enumerate(outs):
        assert before is None, (
            f"rank {r}: step 1 was already committed when save() returned: save must only stage the state and "
            "leave the writing to a background thread"
        )
        assert folder.endswith("step_00000001"), f"rank {r}: wait() returned {folder!r}, not step 1's folder"
        assert second.endswith("step_00000002") and latest == 2, (
            f"rank {r}: the second save: {second!r}, latest {latest}"
        )
        for key, want in expected_boxes("fsdp", r, world_size).items():
            assert_close(loaded[key], want, rtol=0, atol=0, what=f"rank {r}, {key!r} of the step-1 checkpoint (the "
                         "values at the save, not after the next step changed them: stage a copy)")  # fmt: skip


@pytest.mark.task10_4
def test_async_save_copies_plain_tensors_and_non_tensor_values_at_the_save(world_size, tmp_path):
    """A plain tensor, a Shard held on the CPU and dicts in the state change in place after save() returns: the
    checkpoint holds their values at the save (every tensor is copied, every non-tensor value deep-copied, while
    save() blocks)."""
    outs = run_ranks(world_size, async_copies_rank, str(tmp_path))
    for r, (plain, values, host) in enumerate(outs):
        what = f"rank {r}, the plain tensor 'plain' (saved before it changed in place: copy plain tensors too)"
        assert_close(plain, torch.arange(10, dtype=torch.float64), rtol=0, atol=0, what=what)
        what = f"rank {r}, the Shard 'host' held on the CPU (saved before it changed in place: copy CPU boxes too)"
        assert_close(host, torch.arange(4 * r, 4 * r + 4, dtype=torch.float64), rtol=0, atol=0, what=what)
        for key, want in (("sampler", {"epoch": 2, "position": 6, "seed": 7}), ("config", OBJECTS["config"])):
            assert values[key] == want, (
                f"rank {r}: the non-tensor value {key!r} came back as {values[key]}, expected its value at the "
                f"save, {want}: save() must deep-copy non-tensor values (the caller changes them right after)"
            )


@pytest.mark.task10_4
def test_a_new_async_save_waits_for_the_previous_and_wait_reraises_its_error(world_size, tmp_path):
    """save(2) returns only after save(1) has ended (one save in flight); a save whose value cannot be pickled raises
    ValueError from save() or from wait(); the next save still works."""
    for r, (at_return, second, error, after, latest) in enumerate(run_ranks(world_size, async_order_rank,
                                                                            str(tmp_path))):  # fmt: skip
        assert ("end", 1) in at_return, (
            f"rank {r}: save(step 2) returned while the write of step 1 was still running (events {at_return}): "
            "save first waits for the previous save (one save in flight at a time)"
        )
        assert second.endswith("step_00000002"), f"rank {r}: wait() after save(2) returned {second!r}"
        assert error is not None and error.startswith("ValueError"), (
            f"rank {r}: an async save of an unpicklable value: neither save() nor wait() raised its ValueError "
            f"(got {error!r}): wait() re-raises the background save's error"
        )
        assert after.endswith("step_00000004") and latest == 4, f"rank {r}: the save after the error: {after}, {latest}"


@pytest.mark.task10_4
@pytest.mark.parametrize("split", [False, True], ids=["whole", "sub-group"])
def test_async_collectives_run_in_the_background_on_a_group_of_their_own(world_size, tmp_path, split):
    """The background save's collectives run on a group of its own, never the default one (whole); over a sub-group
    (all ranks but the last), only its ranks construct the checkpointer, which saves, and the job's ranks still agree
    on the groups they make next."""
    if world_size == 1:
        pytest.skip("one rank: a save needs no collective (needs world size >= 2)")
    outs = run_ranks(world_size, async_group_rank, str(tmp_path), split)
    for r, (calls, rank, world, loaded) in enumerate(outs):
        if loaded is None:
            continue  # the rank outside the sub-group
        on_default = [name for main, default, name in calls if not main and default]
        assert not on_default, (
            f"rank {r}: the background save ran {on_default[:3]} on the default process group: its collectives "
            "run on a group of its own (dist.new_group in __init__), or they interleave with training's"
        )
        for key, want in expected_boxes("fsdp", rank, world).items():
            assert_close(loaded[key], want, rtol=0, atol=0, what=f"rank {r} (rank {rank} of its group of {world})"
                         f", {key!r} saved by an AsyncCheckpointer")  # fmt: skip


# -- bad input: a clear error on every rank, before any communication ------------------------------


def _one(C, ctx):
    return {"w": C.Shard(torch.ones(2, 3, device=ctx.device), (4, 3), (2, 0))}


BAD_INPUT = [
    BadInput("save-negative-step", lambda C, ctx: C.save_checkpoint(_one(C, ctx), tempfile.mkdtemp(), -1),
             "ValueError", names="step", task="task10_1"),
    BadInput("save-box-outside-the-tensor",
             lambda C, ctx: C.save_checkpoint({"w": C.Shard(torch.ones(2, 3, device=ctx.device), (4, 3), (3, 0))},
                                              tempfile.mkdtemp(), 1),
             "ValueError", names="w", task="task10_1"),
    BadInput("save-unpicklable-value",
             lambda C, ctx: C.save_checkpoint(_one(C, ctx) | {"f": lambda: 0}, tempfile.mkdtemp(), 1),
             "ValueError", names="f", task="task10_1"),
]  # fmt: skip


@pytest.mark.parametrize("case", bad_input_params(BAD_INPUT))
def test_bad_input_raises_on_every_rank_before_communicating(world_size, case):
    """Bad input raises the promised ValueError naming the argument, on every rank, before any message."""
    assert_rejected_before_communicating(run_ranks(world_size, bad_input_rank, "checkpoint", case), case)
