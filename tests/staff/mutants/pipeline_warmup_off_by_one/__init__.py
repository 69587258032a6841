"""Mutant: 1F1B runs one warm-up forward too many (min(p - s, m) instead of min(p - s - 1, m))."""
