"""Mutant: ColumnParallelLinear.from_dense shards the weight on the input dim (the row-parallel split)."""

from tests.staff.mutants.mutate import mutate

mutate(globals(), "reference_solutions.tensor_parallel", "layer.weight = _shard(dense.weight, 0, group)",
       "layer.weight = _shard(dense.weight, 1, group)")  # fmt: skip
