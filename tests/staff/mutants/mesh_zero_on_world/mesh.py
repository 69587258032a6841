"""Mutant: ZeRO shards optimizer state over the world instead of the dp slice."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.mesh",
    "shard_gradients=zero_stage == 2, group=self.dp_group,",
    "shard_gradients=zero_stage == 2, group=None,",
)
