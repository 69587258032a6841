"""Mutant: Owners update their parameters but never send them: the other ranks keep stale copies."""
