"""Mutant: the capacity counts this rank's tokens times the group size, as if every rank had as many tokens."""

import reference_solutions

__path__.append(reference_solutions.__path__[0])
