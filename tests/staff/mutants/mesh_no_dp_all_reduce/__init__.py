"""Mutant: the trainer never averages gradients over dp: replicas drift apart."""

import reference_solutions

# The other parts (ddp, fsdp, tensor_parallel, pipeline, ...) come from the reference, unchanged.
__path__.append(reference_solutions.__path__[0])
