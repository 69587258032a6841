"""Mutant: DDP broadcasts from global rank 0 instead of the group's first rank (breaks on a mesh slice)."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.ddp",
    "src = dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)[0]",
    "src = 0",
)
