"""Mutant: the ring runs over the whole world instead of ``group`` (only a sub-group test sees it)."""

from tests.staff.mutants.mutate import mutate

mutate(globals(), "reference_solutions.context_parallel",
       old="ranks = dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)",
       new="ranks = list(range(dist.get_world_size()))")  # fmt: skip
