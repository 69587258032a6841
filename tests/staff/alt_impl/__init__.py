"""A second implementation of every part, written against the stubs' promises only (staff only).

    pytest tests/ --impl tests.staff.alt_impl -k bad_input      # tests/staff/test_alt_impl.py runs this

It does the work with the staff reference but answers bad input its own way: every ValueError or
TypeError leaves with a message of its own wording, ``[alt] rejected: <names>``, that keeps ONLY the
argument names the stub docstrings promise to name (the function's parameters, and the dotted or
underscored names such as ``x.shape[-1]`` or ``d_ff`` that the stubs use for parts of an argument)
and none of the reference's sentence, order or numbers. A test that passes the reference but fails
here demands wording that no stub states.
"""
