"""Mutant: HSDP never averages gradients across the replicate axis."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.mesh",
    "                    p.register_post_accumulate_grad_hook(self._average_over_replicas)\n",
    "                    pass\n",
)
