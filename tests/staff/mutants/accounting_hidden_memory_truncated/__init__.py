"""Mutant: training_memory_bytes truncates to an int instead of rounding to the nearest."""

import reference_solutions

__path__.append(reference_solutions.__path__[0])
