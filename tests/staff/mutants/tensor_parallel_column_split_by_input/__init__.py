"""Mutant tp_column_split_by_input: see tensor_parallel.py."""
