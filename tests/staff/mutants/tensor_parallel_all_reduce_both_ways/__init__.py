"""Mutant tp_all_reduce_both_ways: see tensor_parallel.py."""
