"""Mutant: the bucket check looks at the new parameter alone, not the bucket's total: few, huge buckets."""
