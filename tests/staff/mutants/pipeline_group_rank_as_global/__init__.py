"""Mutant: neighbours are group ranks passed to send/recv as global ranks (wrong in a subgroup)."""
