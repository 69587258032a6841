"""Mutant: hooks registered per name (named_parameters(remove_duplicate=False)): a tied weight is reduced twice."""
