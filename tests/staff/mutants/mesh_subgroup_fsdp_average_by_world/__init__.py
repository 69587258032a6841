"""Mutant: FSDP divides reduce-scattered grads by the world size instead of the group size."""

import reference_solutions

# The other parts come from the reference, unchanged.
__path__.append(reference_solutions.__path__[0])
