"""Mutant: the bucket being filled when the loop ends is never appended (first parameters unsynced)."""
