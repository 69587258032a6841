"""Mutant: the router gradient is not summed over the EP group (only this rank's tokens count)."""
