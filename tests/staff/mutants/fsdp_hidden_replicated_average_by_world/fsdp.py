"""Mutant: FSDP averages the replicated parameters' grads (biases, norms) over the world, not its group."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.fsdp",
    old="p.grad.div_(dist.get_world_size(self._group))",
    new="p.grad.div_(dist.get_world_size())",
)
