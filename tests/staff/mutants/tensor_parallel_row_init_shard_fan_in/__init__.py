"""Mutant tp_row_init_shard_fan_in: see tensor_parallel.py."""
