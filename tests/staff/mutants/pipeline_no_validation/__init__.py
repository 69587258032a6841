"""Mutant: no check that the batch divides into microbatches (chunk() silently makes uneven ones)."""
