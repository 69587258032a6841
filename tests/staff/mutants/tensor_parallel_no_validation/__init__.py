"""Mutant tp_no_validation: see tensor_parallel.py."""
