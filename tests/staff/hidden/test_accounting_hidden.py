"""Hidden tests for part 6 (never shipped to students): fractional bytes per parameter.

    pytest tests/staff/hidden/test_accounting_hidden.py --impl reference

The public random tests draw whole bytes per parameter. Quantised formats are not whole: 4-bit
weights take 0.5 bytes, an 8-bit Adam 2 bytes of state plus a 4-byte master copy, and block-wise
scales add fractions. ``training_memory_bytes`` promises the product rounded to the NEAREST int
(not truncated); ``zero_memory_per_rank`` keeps fractions.
"""

from __future__ import annotations

import pytest

from tests.oracles.accounting import assert_value, call, evaluate

# (num_params, param_bytes, grad_bytes, optimizer_bytes): products with fractional parts above and
# below one half (never exactly one half), so rounding and truncation differ in some of them.
CASES = [(3, 1.3, 2, 12), (7, 0.5, 2.25, 6.125), (1_000_003, 0.5625, 2, 6), (11, 0.7, 0.7, 0.7), (5, 4.15, 0, 0)]


@pytest.mark.task6_1
def test_memory_with_fractional_bytes_per_parameter_rounds_to_the_nearest_byte():
    """With fractional bytes per parameter (quantised formats), training_memory_bytes rounds to the
    nearest int and zero_memory_per_rank keeps the exact fractional bytes at every stage."""
    calls = []
    for n, p, g, o in CASES:
        kw = dict(param_bytes=p, grad_bytes=g, optimizer_bytes=o)
        calls += [
            call("training_memory_bytes", n, **kw),
            *[call("zero_memory_per_rank", n, 8, s, **kw) for s in range(4)],
        ]
    values = evaluate(*calls)
    for i, (n, p, g, o) in enumerate(CASES):
        total, *stages = values[5 * i : 5 * i + 5]
        exact = n * (p + g + o)
        assert total == round(exact) and isinstance(total, int), (
            f"training_memory_bytes({n}, param_bytes={p}, grad_bytes={g}, optimizer_bytes={o}) = {total!r}; "
            f"exactly {exact:.4f} bytes: expected the nearest int, {round(exact)}"
        )
        expected = [exact, n * (p + g) + n * o / 8, n * p + n * (g + o) / 8, exact / 8]
        for stage, (got, want) in enumerate(zip(stages, expected)):
            assert_value(got, want, f"zero_memory_per_rank({n}, 8, {stage}, p={p}, g={g}, o={o})")
