"""Mutant: top-k weights are the raw probabilities, not renormalised over the chosen k."""
