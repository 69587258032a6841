"""Mutant: the ring's all-gather phase forwards the wrong chunk (off by one)."""
