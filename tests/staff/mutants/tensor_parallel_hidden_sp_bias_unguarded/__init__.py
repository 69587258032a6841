"""Mutant: the sequence-parallel MLP adds fc2's shared bias even when the MLP has no bias."""

import reference_solutions

__path__.append(reference_solutions.__path__[0])
