"""Mutant: FSDP averages the replicated parameters' grads (biases, norms) over the world, not its group."""

import reference_solutions

__path__.append(reference_solutions.__path__[0])
