"""Mutant tp_gather_grad_first_chunk: see tensor_parallel.py."""
