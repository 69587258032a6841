"""Mutant: HSDP shards over the replicate axis and replicates over the shard axis."""

from tests.staff.mutants.mutate import mutate

mutate(
    globals(),
    "reference_solutions.mesh",
    "self.fsdp = fsdp.FSDP(module, compute_dtype=compute_dtype, group=mesh.group(shard_axis))",
    "self.fsdp = fsdp.FSDP(module, compute_dtype=compute_dtype, group=self.replicate_group)\n"
    "        self.replicate_group, self.replicas = mesh.group(shard_axis), mesh.size(shard_axis)",
)
