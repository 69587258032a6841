"""Mutant: from_dense deals experts round-robin (e on rank e % W) while routing expects blocks (e // (E/W))."""
