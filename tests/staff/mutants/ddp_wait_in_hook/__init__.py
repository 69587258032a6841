"""Mutant: DDPIndividualParameters waits for each all-reduce inside its hook: no overlap with backward."""
