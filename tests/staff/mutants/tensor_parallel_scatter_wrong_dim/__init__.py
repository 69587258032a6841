"""Mutant tp_scatter_wrong_dim: see tensor_parallel.py."""
