"""Mutant: dropped assignments are still dispatched and combined instead of contributing zero."""
