"""Mutant: RowParallelLinear draws its shard with the shard's fan-in (in/T), too wide by sqrt(T)."""

from tests.staff.mutants.mutate import mutate

mutate(globals(), "reference_solutions.tensor_parallel",
       "in_features // world))  # (out, in/T)\n        _init_weight(self.weight, in_features)",
       "in_features // world))  # (out, in/T)\n        _init_weight(self.weight, in_features // world)")  # fmt: skip
