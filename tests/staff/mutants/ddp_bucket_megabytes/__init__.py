"""Mutant: the cap is bucket_size_mb * 10**6 bytes instead of bucket_size_mb * 2**20."""
