"""Parent-side comparisons whose failure messages say where, what was expected and what came."""

from __future__ import annotations

import torch

# One tolerance table for the whole suite: (rtol, atol) per dtype. Integer dtypes compare exactly.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-9),
    torch.float32: (1e-5, 1e-6),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    return TOLERANCES.get(dtype, (0.0, 0.0))


def describe_mismatch(actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> str | None:
    """None when ``actual`` matches ``expected``; otherwise a one-paragraph explanation."""
    if not isinstance(actual, torch.Tensor):
        return f"expected a tensor, got {type(actual).__name__}: {actual!r}"[:300]
    if actual.shape != expected.shape:
        return f"shape: expected {tuple(expected.shape)}, got {tuple(actual.shape)}"
    if actual.dtype != expected.dtype:
        return f"dtype: expected {expected.dtype}, got {actual.dtype}"
    if actual.numel() == 0:
        return None
    a, e = actual.detach().double(), expected.detach().double()
    bad = ~torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
    if not bad.any():
        return None
    diff = (a - e).abs().nan_to_num(float("inf"))
    first = tuple(int(i) for i in bad.nonzero()[0])
    return (
        f"{int(bad.sum())} of {a.numel()} elements differ (rtol={rtol:g}, atol={atol:g}); "
        f"max abs diff {diff.max().item():.4g}; first at index {first}: "
        f"expected {e[first].item():.6g}, got {a[first].item():.6g}"
    )


def assert_close(actual, expected, *, what: str, rtol: float | None = None, atol: float | None = None) -> None:
    """Assert one tensor equals the oracle; ``what`` says where (e.g. "rank 1, step 2, fc1.weight.grad")."""
    __tracebackhide__ = True
    default_rtol, default_atol = tolerance(expected.dtype)
    problem = describe_mismatch(
        actual, expected, default_rtol if rtol is None else rtol, default_atol if atol is None else atol
    )
    if problem:
        raise AssertionError(f"{what}: {problem}")


def assert_ranks_close(outs: list, expected, *, what: str, rtol=None, atol=None) -> None:
    """Every rank's output equals ``expected`` (one tensor for all, or a list with one per rank).

    All ranks are checked before failing, so the message lists every rank that is wrong.
    """
    __tracebackhide__ = True
    per_rank = expected if isinstance(expected, (list, tuple)) else [expected] * len(outs)
    problems = []
    for r, (a, e) in enumerate(zip(outs, per_rank)):
        try:
            assert_close(a, e, what=f"rank {r}, {what}", rtol=rtol, atol=atol)
        except AssertionError as exc:
            problems.append(str(exc))
    if problems:
        raise AssertionError("\n".join(problems))
