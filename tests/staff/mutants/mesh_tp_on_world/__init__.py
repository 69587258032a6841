"""Mutant: tensor-parallel MLPs use the world group instead of the tp slice."""

import reference_solutions

# The other parts (ddp, fsdp, tensor_parallel, pipeline, ...) come from the reference, unchanged.
__path__.append(reference_solutions.__path__[0])
