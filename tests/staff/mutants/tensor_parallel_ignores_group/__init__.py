"""Mutant tp_ignores_group: see tensor_parallel.py."""
