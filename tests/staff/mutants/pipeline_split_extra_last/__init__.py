"""Mutant: split_into_stages gives the extra layers to the last stages instead of the first."""
