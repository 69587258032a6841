"""Staff mutants of Part 10's checkpoints (§10.1-10.4): the rows for the promises of issue 35.

    pytest tests/staff/mutants -k checkpoint_ -q

Collected by tests/staff/mutants/table.py with its own rows (the older checkpoint rows live there).
"""

from __future__ import annotations

from tests.staff.mutants.table import CKPT, CKPT_HIDDEN, Mutant

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
]
