"""Mutant: HSDP divides the replicate sum by the world size instead of the replicate size."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.mesh",
    "p.grad.div_(self.replicas)",
    "p.grad.div_(dist.get_world_size())",
)
