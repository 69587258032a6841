"""Mutant tp_mlp_extra_gather: see tensor_parallel.py."""
