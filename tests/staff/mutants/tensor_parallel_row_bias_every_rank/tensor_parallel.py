"""Mutant: RowParallelLinear adds the bias on every rank before the all-reduce (so T times)."""

from tests.staff.mutants.mutate import mutate

mutate(globals(), "reference_solutions.tensor_parallel",
       "y = reduce_from_tp_region(F.linear(x, self.weight), self.group)",
       "return reduce_from_tp_region(F.linear(x, self.weight, self.bias), self.group)")  # fmt: skip
