"""Mutant: the trainer never averages gradients over dp: replicas drift apart."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.mesh",
    "            ddp.all_reduce_gradients_flat(self.module, group=self.dp_group)\n",
    "            pass\n",
)
