"""Mutant: FSDP gathers the weight with an autograd-aware all-gather and calls F.linear on it:
autograd saves the gathered weight for backward, so it lives from forward to backward."""
