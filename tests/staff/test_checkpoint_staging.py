"""The reference's staging of device tensors for an async save (issue 46), tested on the CPU.

    pytest tests/staff/test_checkpoint_staging.py --impl reference

``reference_solutions.checkpoint._HostStaging`` keeps host buffers between saves (pinned when the tensors are on
CUDA): one buffer per save in flight, reused by the next save, grown when a save needs more, never handed to a
second save while the first holds it. Its logic does not depend on pinning, so it runs here on CPU tensors
(``pin=False``); ``AsyncCheckpointer`` is driven through it by routing CPU tensors into it
(``_pinned_staging``, which is ``t.is_cuda`` in the reference). The last test needs a GPU and skips without one.
"""

from __future__ import annotations

import pytest
import torch

from reference_solutions import checkpoint as C

pytestmark = pytest.mark.staff


def _state(scale: float, n: int = 1000) -> dict:
    return {
        "w": C.Shard(torch.arange(n, dtype=torch.float32) * scale, (2 * n,), (n,)),
        "b": torch.full((3, 5), scale, dtype=torch.bfloat16),
        "empty": torch.empty(0, 4),
        "step": torch.tensor(7),
    }


def _span(t: torch.Tensor) -> tuple[int, int]:
    return t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()


def test_staged_copies_are_views_of_one_buffer_that_the_next_save_reuses():
    """Each staged copy equals its tensor at staging time, is an aligned view of one buffer, and a released
    buffer is leased again to the next save (one allocation)."""
    staging = C._HostStaging(pin=False)
    tensors = {"a": torch.arange(10.0), "b": torch.ones(3, 4, dtype=torch.bfloat16), "c": torch.tensor(3)}
    buffer, copies = staging.stage(tensors)
    lo, hi = _span(buffer)
    for key, t in tensors.items():
        assert torch.equal(copies[key], t) and copies[key].dtype == t.dtype, key
        assert lo <= copies[key].data_ptr() and _span(copies[key])[1] <= hi, f"{key}: not a view of the buffer"
        assert (copies[key].data_ptr() - lo) % C._STAGING_ALIGN == 0, f"{key}: not aligned"
    tensors["a"] += 1  # the copy is the value at staging time
    assert torch.equal(copies["a"], torch.arange(10.0))
    staging.release(buffer)
    again, _ = staging.stage(tensors)
    assert again.data_ptr() == buffer.data_ptr() and staging.allocations == 1, "a released buffer was not reused"


def test_a_save_that_needs_more_grows_the_buffer_and_later_saves_reuse_it():
    """A save larger than the free buffer gets a grown one; smaller and equal saves after it reuse that buffer
    (two allocations in all)."""
    staging = C._HostStaging(pin=False)
    small, _ = staging.stage({"a": torch.ones(100)})
    staging.release(small)
    big, copies = staging.stage({"a": torch.ones(100), "b": torch.arange(5000.0)})
    assert staging.allocations == 2 and big.numel() >= 5100 * 4, "a buffer too small for the save was not grown"
    assert torch.equal(copies["b"], torch.arange(5000.0))
    staging.release(big)
    for n in (100, 5000):  # smaller and equal saves keep the grown buffer
        buffer, _ = staging.stage({"a": torch.ones(n)})
        assert buffer.data_ptr() == big.data_ptr(), f"a save of {n} floats did not reuse the grown buffer"
        staging.release(buffer)
    assert staging.allocations == 2


def test_two_saves_in_flight_never_share_a_buffer():
    """A second save while the first still holds its buffer gets memory of its own (the first's staged values
    survive); once both are released, the next two saves reuse those two buffers."""
    staging = C._HostStaging(pin=False)
    first, copies_1 = staging.stage({"a": torch.zeros(1000)})
    second, copies_2 = staging.stage({"a": torch.ones(1000)})  # the first is not released: still being written
    (lo1, hi1), (lo2, hi2) = _span(first), _span(second)
    assert hi1 <= lo2 or hi2 <= lo1, "two saves in flight got overlapping staging memory"
    assert torch.equal(copies_1["a"], torch.zeros(1000)), "the second save overwrote the first one's staged values"
    staging.release(first)
    staging.release(second)
    third, _ = staging.stage({"a": torch.ones(10)})
    fourth, _ = staging.stage({"a": torch.ones(10)})
    assert {third.data_ptr(), fourth.data_ptr()} == {first.data_ptr(), second.data_ptr()}
    assert staging.allocations == 2


def test_a_failed_staging_gives_its_buffer_back():
    """A staging that raises part-way (a meta tensor) returns its buffer to the pool: the next save allocates
    nothing new."""
    staging = C._HostStaging(pin=False)
    with pytest.raises((RuntimeError, NotImplementedError)):  # a meta tensor has no data to copy
        staging.stage({"a": torch.ones(4), "bad": torch.empty(3, device="meta")})
    staging.stage({"a": torch.ones(4)})
    assert staging.allocations == 1, "the buffer of a staging that failed was lost"


def test_nothing_to_stage_leases_nothing_and_cpu_tensors_are_not_pinned():
    """An empty state leases no buffer; CPU tensors (pin=None) are staged in unpinned memory."""
    staging = C._HostStaging()
    assert staging.stage({}) == (None, {}) and staging.allocations == 0
    buffer, _ = staging.stage({"a": torch.ones(4)})
    assert not buffer.is_pinned(), "pin=None pinned the buffer for CPU tensors (pinning needs CUDA)"


def test_async_checkpointer_stages_through_one_buffer_released_after_each_write(tmp_path, monkeypatch):
    """Every tensor routed through the staging: the checkpoint holds the values at the save, the buffer is back in
    the pool once the write ended, and three saves allocate it once."""
    monkeypatch.setattr(C, "_pinned_staging", lambda t: True)
    ckpt = C.AsyncCheckpointer(tmp_path)
    for step in (1, 2, 3):
        state = _state(float(step))
        ckpt.save(state, step)
        with torch.no_grad():
            state["w"].local.add_(100)  # the next training step, right after save returns
            state["b"].add_(100)
        assert ckpt.wait().name == f"step_{step:08d}"
        assert len(ckpt._staging._free) == 1, "the staging buffer was not released when the write ended"
    assert ckpt._staging.allocations == 1, f"three saves of one state allocated {ckpt._staging.allocations} buffers"
    loaded = _state(0.0)
    C.load_checkpoint(loaded, tmp_path, 2)
    want = _state(2.0)
    assert torch.equal(loaded["w"].local, want["w"].local) and torch.equal(loaded["b"], want["b"])
    assert torch.equal(loaded["step"], want["step"])
    ckpt.close()


def test_async_checkpointer_gives_the_buffer_back_when_the_write_fails(tmp_path, monkeypatch):
    """A background write that fails (an unpicklable value) still releases its staging buffer, which the next
    save reuses."""
    monkeypatch.setattr(C, "_pinned_staging", lambda t: True)
    ckpt = C.AsyncCheckpointer(tmp_path)
    ckpt.save(_state(1.0) | {"f": lambda: 0}, 1)  # unpicklable: the background save raises ValueError
    with pytest.raises(ValueError):
        ckpt.wait()
    assert len(ckpt._staging._free) == 1
    ckpt.save(_state(1.0), 2)
    assert ckpt.wait().name == "step_00000002" and ckpt._staging.allocations == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (pinned staging)")
def test_cuda_tensors_are_staged_in_pinned_memory_and_saved_exactly(tmp_path):
    """On a GPU: two async saves of CUDA tensors stage through one pinned buffer, kept for the next save."""
    ckpt = C.AsyncCheckpointer(tmp_path)
    state = {k: (C.Shard(v.local.cuda(), v.global_shape, v.offsets) if isinstance(v, C.Shard) else v.cuda())
             for k, v in _state(1.0).items()}  # fmt: skip
    for step in (1, 2):
        ckpt.save(state, step)
        with torch.no_grad():
            state["w"].local.add_(100)
        ckpt.wait()
    (buffer,) = ckpt._staging._free
    assert buffer.is_pinned() and ckpt._staging.allocations == 1
    loaded = _state(0.0)
    C.load_checkpoint(loaded, tmp_path, 1)
    assert torch.equal(loaded["w"].local, _state(1.0)["w"].local)
    into = {k: (C.Shard(v.local.cuda(), v.global_shape, v.offsets) if isinstance(v, C.Shard) else v.cuda())
            for k, v in _state(0.0).items()}  # fmt: skip
    C.load_checkpoint(into, tmp_path, 2)  # pinned reads, copies queued, one wait
    assert torch.equal(into["w"].local.cpu(), _state(1.0)["w"].local + 100)
    ckpt.close()
