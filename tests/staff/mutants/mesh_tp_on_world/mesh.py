"""Mutant: tensor-parallel MLPs use the world group instead of the tp slice."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.mesh",
    "TensorParallelMLP.from_dense(child, group=tp_group)",
    "TensorParallelMLP.from_dense(child, group=None)",
)
