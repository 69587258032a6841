"""Mutant: add_param_group after construction records the group but never gives it to the inner
optimizer: parameters added mid-training are never updated."""
