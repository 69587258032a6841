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
        caught_by=CKPT_HIDDEN(POWER_LOSS_OLDER, "which fails verify_checkpoint"),
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
]
