"""Mutant: a stage never releases a microbatch's stashed activations after its backward."""
