"""Mutant: DDPBucketed never resets which grads are ready, so later steps launch buckets too early."""
