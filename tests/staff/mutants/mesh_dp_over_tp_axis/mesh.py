"""Mutant: the trainer averages gradients over the tp axis instead of dp."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.mesh",
    "ddp.all_reduce_gradients_flat(self.module, group=self.dp_group)",
    'ddp.all_reduce_gradients_flat(self.module, group=self.mesh.group("tp"))',
)
