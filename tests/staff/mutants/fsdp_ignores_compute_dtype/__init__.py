"""Mutant: FSDP accepts compute_dtype but computes in fp32 anyway."""
