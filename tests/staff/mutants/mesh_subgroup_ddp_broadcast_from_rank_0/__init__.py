"""Mutant: DDP broadcasts from global rank 0 instead of the group's first rank (breaks on a mesh slice)."""

import reference_solutions

# The other parts come from the reference, unchanged.
__path__.append(reference_solutions.__path__[0])
