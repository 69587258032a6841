"""Mutant tp_no_backward_all_reduce: see tensor_parallel.py."""
