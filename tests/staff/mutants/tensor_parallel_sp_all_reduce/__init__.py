"""Mutant tp_sp_all_reduce: see tensor_parallel.py."""
