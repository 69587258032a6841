"""Mutant: the all-reduce averages (the DDP habit) where tensor parallelism needs a plain sum."""

from tests.staff.mutants.mutate import mutate

mutate(globals(), "reference_solutions.tensor_parallel", "    dist.all_reduce(out, group=group)\n    return out",
       "    dist.all_reduce(out, group=group)\n    return out / _world(group)")  # fmt: skip
