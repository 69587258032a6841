"""Mutant tp_average_not_sum: see tensor_parallel.py."""
