"""Mutant: HSDP broadcasts only within the shard slice: replicas start from different models."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.mesh",
    "                    dist.broadcast(t, src=src, group=self.replicate_group)\n",
    "                    pass\n",
)
