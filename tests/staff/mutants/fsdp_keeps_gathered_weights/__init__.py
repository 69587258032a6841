"""Mutant: FSDP caches each layer's gathered weight after forward to reuse it in backward (one
gather saved, but every full weight stays alive: no memory saved)."""
