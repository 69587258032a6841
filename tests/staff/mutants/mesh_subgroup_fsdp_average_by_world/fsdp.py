"""Mutant: FSDP divides reduce-scattered grads by the world size instead of the group size."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(), "reference_solutions.fsdp", "return chunk.div_(self.world)", "return chunk.div_(dist.get_world_size())"
)
