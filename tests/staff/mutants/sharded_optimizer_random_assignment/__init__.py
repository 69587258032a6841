"""Mutant: Parameters assigned to ranks at random: each rank draws its own assignment (torch is
seeded differently on each rank), so some parameters have two owners and some none."""
