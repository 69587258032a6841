"""Mutant: ColumnParallelLinear does not check that out_features divides by the TP size."""

from tests.staff.mutants.mutate import mutate

mutate(globals(), "reference_solutions.tensor_parallel", '_check_divisible(out_features, world, "out_features")',
       "pass")  # fmt: skip
