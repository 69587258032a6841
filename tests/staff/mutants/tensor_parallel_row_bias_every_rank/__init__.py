"""Mutant tp_row_bias_every_rank: see tensor_parallel.py."""
