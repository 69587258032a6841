"""Mutant: DDPBucketed divides each bucket by the world size before the all-reduce and again after."""
