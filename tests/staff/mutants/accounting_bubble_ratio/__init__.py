"""Mutant: Bubble as Megatron's ratio to the ideal time, (p-1)/(v*m), not a fraction of the step."""
