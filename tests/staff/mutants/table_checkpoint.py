"""Staff mutants of Part 10's checkpoints (§10.1-10.4): the rows for the promises of issue 35.

    pytest tests/staff/mutants -k checkpoint_ -q

Collected by tests/staff/mutants/table.py with its own rows (the older checkpoint rows live there).
"""

from __future__ import annotations

from tests.staff.mutants.table import CKPT, CKPT_HIDDEN, RANK, Mutant

POWER_LOSS = "power_loss_during_a_save"
POWER_LOSS_OLDER = "power_loss_while_an_older_save"

MUTANTS = [
    # -- crash consistency and durability (the simulated power loss) --
    Mutant(
        "checkpoint_renames_before_fsync",
        "checkpoint",
        "each file is renamed to its final name right after its writes, and fsync-ed only then",
        old="        f.flush()",
        new="        f.flush()\n        os.replace(tmp, path)\n        tmp = path  # already in place",
        caught_by=(
            CKPT(POWER_LOSS, "must never point at a half-written file"),
            CKPT_HIDDEN("power_loss_after_any", "must never point at a half-written file"),
        ),
    ),
    Mutant(
        "checkpoint_marker_before_metadata",
        "checkpoint",
        "rank 0 puts the COMMITTED marker in place before metadata.json",
        old="((_METADATA, raw), (COMMIT_MARKER, marker))",
        new="((COMMIT_MARKER, marker), (_METADATA, raw))",
        caught_by=(
            CKPT(POWER_LOSS, "must be the save's last change"),
            CKPT_HIDDEN("power_loss_after_any", "must be the save's last change"),
        ),
    ),
    Mutant(
        "checkpoint_keeps_an_older_folder_of_the_step",
        "checkpoint",
        "a folder of the same step left by an older save is written into, not removed first",
        old="        if folder.exists():",
        new="        if False:",
        caught_by=(
            CKPT("over_an_older_folder", "which fails verify_checkpoint"),
            CKPT_HIDDEN(POWER_LOSS_OLDER, "which fails verify_checkpoint"),
        ),
    ),
    # -- what commit checks --
    Mutant(
        "checkpoint_commit_trusts_the_reported_sizes",
        "checkpoint",
        "rank 0 checks that every reported file exists, not that it has the reported size",
        old='if not path.is_file() or path.stat().st_size != rep["size"]:',
        new="if not path.is_file():",
        caught_by=CKPT("cut_short", "must check every rank's reported files and sizes", names=RANK),
    ),
    Mutant(
        "checkpoint_commit_outcome_not_broadcast",
        "checkpoint",
        "a failed commit raises on rank 0 only: the other ranks return as if step 2 were saved",
        old="verdict = _broadcast_object(verdict, group, world, ranks)",
        new="pass",
        caught_by=CKPT("cut_short", "broadcast the outcome", names=("rank 1",), world_sizes="2"),
    ),
    Mutant(
        "checkpoint_plan_ignores_the_dtype",
        "checkpoint",
        "the plan checks that ranks agree on each key's global shape, not on its dtype",
        old="if seen.setdefault(key, (dtype, shape)) != (dtype, shape):",
        new="if seen.setdefault(key, (dtype, shape))[1] != shape:",
        caught_by=CKPT("disagreeing and dtype", "another dtype than the others", names=RANK, world_sizes="2"),
    ),
    Mutant(
        "checkpoint_marker_not_matched_to_the_metadata",
        "checkpoint",
        "any COMMITTED marker commits its folder: its content is never checked against the metadata",
        old='if not isinstance(commit, dict) or commit.get("metadata_crc32") != zlib.crc32(raw):',
        new="if not isinstance(commit, dict):",
        caught_by=CKPT("marker_from_another_save", "latest_checkpoint returned 2"),
    ),
    Mutant(
        "checkpoint_latest_skips_the_sizes",
        "checkpoint",
        "latest_checkpoint checks the marker against the metadata but not that the data files exist with their sizes",
        old="_read_committed(step_directory(root, step))",
        new="_read_committed(step_directory(root, step), check_sizes=False)",
        caught_by=CKPT("exist_with_their_sizes", "checks every rank's file exists"),
    ),
    # -- what verify and load check --
    Mutant(
        "checkpoint_verify_checks_the_first_block",
        "checkpoint",
        "verify_checkpoint checks the first checksum block of each box only",
        old="_check_blocks(piece, 0, _box_crcs(box), f\"{what} of {folder / info['file']}\")",
        new="_check_blocks(piece[:CHECKSUM_BLOCK_BYTES], 0, _box_crcs(box), f\"{what} of {folder / info['file']}\")",
        caught_by=CKPT("every_block_of_every_box", "not only the first"),
    ),
    Mutant(
        "checkpoint_verify_skips_the_pickled_values",
        "checkpoint",
        "verify_checkpoint checks the tensor boxes' blocks but not those of the pickled non-tensor values",
        old='what = "the non-tensor values" if box["key"] == _OBJECTS else f"key {box[\'key\']!r}"',
        new='what = f"key {box[\'key\']!r}"\n            if box["key"] == _OBJECTS:\n                continue',
        caught_by=CKPT("every_block_of_every_box", "the pickled values have block checksums too"),
    ),
    Mutant(
        "checkpoint_unpickles_before_checking",
        "checkpoint",
        "load_checkpoint unpickles the non-tensor values first and checks their checksums after",
        old='blob = f.read(box["nbytes"])',
        new='blob = f.read(box["nbytes"])\n        pickle.loads(blob)  # a first look',
        caught_by=CKPT("before_unpickling", "before unpickling them", names=RANK),
    ),
    Mutant(
        "checkpoint_partial_load_is_silent",
        "checkpoint",
        "a requested box that the saved boxes cover only in part is filled where they do, the rest left as it was",
        old="if covered != shard.local.numel():",
        new="if False:",
        caught_by=CKPT("cover_whole", "expected a KeyError"),
    ),
    Mutant(
        "checkpoint_highest_replica_writes",
        "checkpoint",
        "the highest group rank holding a replicated box writes it, not the lowest",
        old="writer.setdefault((key, offsets, local_shape), r)",
        new="writer[(key, offsets, local_shape)] = r",
        caught_by=CKPT(
            "lowest_rank_holding", "the lowest group rank holding a replicated box writes it", world_sizes="2"
        ),
    ),
    Mutant(
        "checkpoint_reads_record_the_values",
        "checkpoint",
        "load_checkpoint(reads=) also records the read of the pickled non-tensor values",
        old='blob = f.read(box["nbytes"])',
        new='blob = f.read(box["nbytes"])\n        if reads is not None:\n'
        '            reads.append((info["file"], box["start"], box["start"] + box["nbytes"]))',
        caught_by=CKPT("tensor_data_only", "records the reads of tensor data only", names=RANK),
    ),
    # -- asynchronous saves --
    Mutant(
        "checkpoint_async_plain_tensor_not_copied",
        "checkpoint",
        "AsyncCheckpointer.save copies the Shards but hands plain tensors to the thread as they are",
        old='staged[key] = value.detach().to("cpu", copy=True)',
        new="staged[key] = value.detach()",
        caught_by=CKPT("copies_plain_tensors", ("copy plain tensors too", "checksum mismatch"), names=RANK),
    ),
    Mutant(
        "checkpoint_async_values_not_copied",
        "checkpoint",
        "AsyncCheckpointer.save hands the non-tensor values (dicts) to the thread without copying them",
        old="staged[key] = copy.deepcopy(value)",
        new="staged[key] = value",
        caught_by=CKPT("copies_plain_tensors", "must deep-copy non-tensor values", names=RANK),
    ),
    Mutant(
        "checkpoint_async_save_does_not_wait",
        "checkpoint",
        "AsyncCheckpointer.save starts a new write without waiting for the one in flight",
        old="self.wait()  # one save in flight: the previous one first (and its error)",
        new="pass",
        caught_by=CKPT("waits_for_the_previous", "one save in flight at a time", names=RANK, world_sizes="1"),
    ),
    Mutant(
        "checkpoint_async_error_swallowed",
        "checkpoint",
        "AsyncCheckpointer.wait drops the background save's error",
        old="            raise error",
        new="            pass",
        caught_by=CKPT("waits_for_the_previous", "wait() re-raises the background save's error", names=RANK),
    ),
    Mutant(
        "checkpoint_async_on_the_callers_group",
        "checkpoint",
        "the background save's collectives run on the caller's (default) group, not a group of its own",
        old="self._group = dist.new_group(ranks, use_local_synchronization=True) if world > 1 else group",
        new="self._group = group",
        caught_by=CKPT("group_of_their_own and whole", "on the default process group", names=RANK, world_sizes="2"),
    ),
    Mutant(
        "checkpoint_async_group_over_every_rank",
        "checkpoint",
        "the checkpointer's group is made by new_group without local synchronization, which every rank of the "
        "job must call: over a sub-group, the ranks then disagree on the groups made next",
        old="self._group = dist.new_group(ranks, use_local_synchronization=True) if world > 1 else group",
        new="self._group = dist.new_group(ranks) if world > 1 else group",
        caught_by=CKPT("group_of_their_own and sub-group", ("hung", "rank"), world_sizes="4", within=90),
    ),
]
