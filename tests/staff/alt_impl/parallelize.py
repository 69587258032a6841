"""The alternative parallelize: the reference's work, bad input answered in its own words (see __init__)."""

from tests.staff.alt_impl._rewrite import rebuild

rebuild(globals(), "reference_solutions.parallelize")
