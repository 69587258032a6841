"""Mutant: zero_memory_per_gpu treats any stage above 3 as stage 3 instead of rejecting it."""
