"""Mutant: each rank calls new_group only for the slices it belongs to (new_group is collective)."""

import reference_solutions

# The other parts (ddp, fsdp, tensor_parallel, pipeline, ...) come from the reference, unchanged.
__path__.append(reference_solutions.__path__[0])
