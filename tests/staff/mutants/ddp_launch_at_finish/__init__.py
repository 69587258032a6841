"""Mutant: DDPBucketed only marks grads ready during backward and launches every bucket in finish."""
