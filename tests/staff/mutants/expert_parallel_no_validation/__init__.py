"""Mutant: num_experts not divisible by the EP size is accepted (experts silently lost)."""
