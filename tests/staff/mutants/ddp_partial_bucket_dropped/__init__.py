"""Mutant: finish never launches a bucket whose parameters did not all get a grad this step."""
