"""Mutant tp_sp_bias_unscaled: see tensor_parallel.py."""
