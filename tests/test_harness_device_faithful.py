"""Device-faithful mode's stray tensors and job sizes (tests/harness/stray_tensors.py): what NCCL fails, on gloo.

    pytest tests/test_harness_device_faithful.py -v

These tests never touch the implementation under test (marker ``harness``). Each turns the mode on for its own
runs (the pool reads ``CS336_DEVICE_FAITHFUL`` per run), whatever the session's option.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.harness import RankFailure, run_ranks
from tests.harness.config import CONFIG, set_stand_in_gpus, stand_in_gpus
from tests.harness.defaults import ENV_DEVICE_FAITHFUL
from tests.harness.run import gpu_shortfall

pytestmark = [pytest.mark.harness, pytest.mark.world_sizes(2, reason="the checks are per rank: two ranks show them")]


@pytest.fixture(autouse=True)
def _faithful(monkeypatch):
    if CONFIG.backend != "gloo":
        pytest.skip("device-faithful mode stands in for NCCL on gloo; on NCCL the GPU itself judges")
    monkeypatch.setenv(ENV_DEVICE_FAITHFUL, "1")


def given_model_rank(ctx, moved: bool):
    """The given MLP (cs336_systems/models.py makes its nn.Linear without device=), fed the rank's tensor."""
    from cs336_systems.models import MLP

    mlp = MLP(4, 8).to(ctx.device) if moved else MLP(4, 8)
    return mlp(torch.randn(2, 4, device=ctx.device))


def stray_buffer_rank(ctx):
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).to(ctx.device)
    model.add_module("late", nn.BatchNorm1d(4))  # added after the move: its buffers stay on the CPU under NCCL
    torch.distributed.all_reduce(model.late.running_mean)


def cpu_optimizer_state_rank(ctx):
    model = nn.Linear(4, 4, device=ctx.device)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    x = torch.randn(2, 4, device=ctx.device)
    for _ in range(2):
        model(x).sum().backward()
        opt.step()
        for p in model.parameters():  # "save GPU memory": the state to the CPU, where the next step cannot use it
            opt.state[p]["exp_avg"] = opt.state[p]["exp_avg"].cpu()


def cpu_only_rank(ctx):
    """Everything on the CPU on purpose (an oracle in a rank): nothing for NCCL to refuse."""
    g = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 5), nn.LayerNorm(5))
    x = torch.randn(2, 3, generator=g)
    y = model(x).sum()
    y.backward()
    return y.detach().item(), model[0].weight.grad.cpu().sum().item()


def big_job_rank(ctx, world_size: int):
    import torch.distributed as dist

    try:
        dist.init_process_group("gloo", world_size=world_size, rank=0, store=dist.HashStore())
    except Exception as exc:  # noqa: BLE001 - judged in the parent
        return f"{type(exc).__name__}: {exc}"
    return None


def test_a_module_given_code_makes_on_the_cpu_fails_where_it_meets_the_rank_s_tensor(world_size):
    """DeepMLP's failure on the GPU run: a given module built without device= and fed the rank's tensor fails,
    naming the parameter and both lines (the given code's, the test's); moved with .to(ctx.device) it passes."""
    with pytest.raises(RankFailure) as failure:
        run_ranks(world_size, given_model_rank, False)
    text = str(failure.value)
    assert "StrayTensor" in text and "Linear.weight" in text, text
    assert "cs336_systems/models.py:" in text and "test_harness_device_faithful.py:" in text, text
    run_ranks(world_size, given_model_rank, True)


def test_a_cpu_buffer_in_a_collective_fails_naming_it(world_size):
    """A buffer torch made on the CPU (BatchNorm's running_mean, added after the move) in an all-reduce fails."""
    with pytest.raises(RankFailure, match=r"ProcessGroup.allreduce: BatchNorm1d.running_mean"):
        run_ranks(world_size, stray_buffer_rank)


def test_optimizer_state_moved_to_the_cpu_fails_at_the_next_step(world_size):
    """Optimizer state copied to the CPU (``.cpu()``) fails when the next step mixes it with the gradients."""
    with pytest.raises(RankFailure, match=r"moved with \.cpu\(\).*cpu_optimizer_state_rank"):
        run_ranks(world_size, cpu_optimizer_state_rank)


def test_a_computation_kept_on_the_cpu_on_purpose_passes(world_size):
    """A model, its input and its gradient all on the CPU (an oracle in a rank) mix nothing: no false alarm."""
    outs = run_ranks(world_size, cpu_only_rank)
    assert len(outs) == world_size


def test_a_job_of_more_ranks_than_the_node_it_stands_for_fails_and_the_skip_rule_says_how_many():
    """Asked for, the mode stands for a node with a GPU per rank of the largest --world-sizes (here: 2): a process
    group of more ranks fails ("Duplicate GPU detected" on NCCL), and the one rule for skips names the count."""
    saved = stand_in_gpus()
    set_stand_in_gpus(2)  # read by the ranks when they check, by the parent when it decides a skip
    try:
        got = run_ranks(1, big_job_rank, 3)
        assert gpu_shortfall(3, "a job of 3 ranks") == (
            "a job of 3 ranks needs 3 GPUs on nccl (one per rank), device-faithful mode stands for a node of 2 (the "
            "largest --world-sizes)"
        )
        assert gpu_shortfall(2) is None
    finally:
        set_stand_in_gpus(saved)
    assert got[0] is not None and got[0].startswith("TooManyRanks") and "a job of 3 ranks" in got[0], got


# What CUDA accepts and what it refuses, one case each (issue 53): each runs in a rank under the mode, and must
# pass where a GPU run passes and fail, with StrayTensor, where it fails.
def _header_filled_from_a_cpu_shape(ctx):
    header = torch.zeros(6, dtype=torch.int64, device=ctx.device)
    header[2:4] = torch.tensor([3, 4])  # a copy across devices


def _a_cpu_scalar_divides(ctx):
    x = torch.ones(3, device=ctx.device)
    x.div_(torch.tensor(2.0))
    return (x / torch.tensor(2.0)).sum().item()


def _bookkeeping_read_on_the_host(ctx):
    return torch.arange(4).tolist(), torch.tensor(3).item(), torch.zeros(2, 3).shape[1]


def _a_cpu_index_into_a_gpu_tensor(ctx):
    return torch.arange(5.0, device=ctx.device)[torch.tensor([0, 2])].tolist()


def _moved_before_it_meets_the_rank_s(ctx):
    return (torch.zeros(3).to(ctx.device) + torch.ones(3, device=ctx.device)).tolist()


def _tensors_report_where_they_live(ctx):
    x = torch.ones(3, device=ctx.device)
    assert x.device == ctx.device and x.is_cuda and x.device.type == "cuda", (x.device, ctx.device)
    host = x.cpu()
    assert host.device.type == "cpu" and not host.is_cuda and host.get_device() == -1, host.device


def _a_branch_on_the_device_keeps_gpu_tensors(ctx):
    """Put each tensor where its sender had it: AdamW's step on the CPU, the rest on the GPU."""
    x = torch.ones(3, device=ctx.device)
    state = {"exp_avg": x.clone(), "step": torch.tensor(1.0)}
    placed = {k: v.cpu() if v.device.type == "cpu" else v.to(ctx.device) for k, v in state.items()}
    return (placed["exp_avg"] + x).tolist()


def _a_module_moved_with_device_and_dtype(ctx):
    from cs336_systems.models import MLP

    mlp = MLP(4, 8).to(device=ctx.device, dtype=torch.float32)
    return mlp(torch.randn(2, 4, device=ctx.device)).sum().item()


def _a_side_stream_and_its_events(ctx):
    """What code on a GPU does with streams (a copy overlapped on a side stream), stood in on a CPU build."""
    x = torch.ones(3, device=ctx.device)
    side = torch.cuda.Stream(device=x.device)
    with torch.cuda.stream(side):
        y = x * 2
    y.record_stream(side)
    torch.cuda.current_stream(x.device).wait_stream(side)
    done = torch.cuda.Event()
    done.record(side)
    done.synchronize()
    torch.cuda.synchronize(x.device)
    return y.tolist()


def _a_meta_tensor_stays_on_meta(ctx):
    shape_only = torch.empty(1 << 30, device="meta")  # no memory anywhere: never made on the CPU here
    assert shape_only.is_meta and torch.zeros_like(shape_only).is_meta, shape_only


def _a_hook_keeps_its_gradient_s_device(ctx):
    w = torch.ones(3, device=ctx.device, requires_grad=True)
    w.register_hook(lambda g: g * 2)
    (w * 2).sum().backward()


def _a_cpu_vector_meets_a_gpu_tensor(ctx):
    return torch.ones(3) + torch.ones(3, device=ctx.device)


def _a_cpu_vector_times_a_gpu_scalar(ctx):
    return torch.ones(3) * torch.tensor(2.0, device=ctx.device)


def _a_running_loss_kept_on_the_cpu(ctx):
    total = torch.zeros(())
    total += torch.ones((), device=ctx.device)


def _a_cpu_tensor_all_reduced(ctx):
    torch.distributed.all_reduce(torch.ones(3))


def _numpy_of_a_gpu_tensor(ctx):
    return torch.ones(3, device=ctx.device).numpy()


def _a_cpu_tensor_over_gpu_storage(ctx):
    x = torch.ones(3, device=ctx.device)
    return torch.empty(0).set_(x.untyped_storage(), 0, (3,))


def _a_cpu_tensor_indexed_by_a_gpu_index(ctx):
    return torch.arange(5.0)[torch.tensor([0, 1], device=ctx.device)]


def _a_backward_hook_all_reduces_a_host_copy(ctx):
    w = torch.ones(3, device=ctx.device, requires_grad=True)
    w.register_post_accumulate_grad_hook(lambda p: torch.distributed.all_reduce(p.grad.cpu()))
    (w * 2).sum().backward()


class _CpuGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return (grad * 2).cpu()


def _a_function_s_backward_returns_a_cpu_gradient(ctx):
    x = torch.ones(3, device=ctx.device, requires_grad=True)
    _CpuGradient.apply(x).sum().backward()


def _a_tensor_hook_returns_a_host_copy(ctx):
    w = torch.ones(3, device=ctx.device, requires_grad=True)
    w.register_hook(lambda g: g.cpu())
    (w * 2).sum().backward()


def _an_array_s_tensor_sent(ctx):
    import numpy as np

    torch.distributed.all_reduce(torch.from_numpy(np.ones(3)))


def _a_like_tensor_on_the_cpu_sent(ctx):
    torch.distributed.all_reduce(torch.zeros_like(torch.ones(3, device=ctx.device), device=torch.device("cpu")))


def _moved_to_a_cpu_device_object_then_mixed(ctx):
    x = torch.ones(3, device=ctx.device)
    return x.to(torch.device("cpu")) + x


def _a_gpu_draw_from_a_cpu_generator(ctx):
    return torch.randn(3, generator=torch.Generator().manual_seed(0), device=ctx.device)


GPU_PASSES = [_header_filled_from_a_cpu_shape, _a_cpu_scalar_divides, _bookkeeping_read_on_the_host,
              _a_cpu_index_into_a_gpu_tensor, _moved_before_it_meets_the_rank_s, _tensors_report_where_they_live,
              _a_branch_on_the_device_keeps_gpu_tensors, _a_hook_keeps_its_gradient_s_device,
              _a_module_moved_with_device_and_dtype, _a_side_stream_and_its_events,
              _a_meta_tensor_stays_on_meta]  # fmt: skip
GPU_FAILS = [_a_cpu_vector_meets_a_gpu_tensor, _a_cpu_vector_times_a_gpu_scalar, _a_running_loss_kept_on_the_cpu,
             _a_cpu_tensor_all_reduced, _numpy_of_a_gpu_tensor, _a_cpu_tensor_over_gpu_storage,
             _a_cpu_tensor_indexed_by_a_gpu_index, _a_backward_hook_all_reduces_a_host_copy,
             _a_function_s_backward_returns_a_cpu_gradient, _a_tensor_hook_returns_a_host_copy,
             _an_array_s_tensor_sent, _a_like_tensor_on_the_cpu_sent,
             _moved_to_a_cpu_device_object_then_mixed, _a_gpu_draw_from_a_cpu_generator]  # fmt: skip


def _case_rank(ctx, case):
    case(ctx)


@pytest.mark.parametrize("case", GPU_PASSES, ids=lambda f: f.__name__.strip("_"))
def test_what_cuda_accepts_passes(world_size, case):
    """Copies across devices, a 0-dim CPU scalar, a CPU index, host bookkeeping, a move before use, a branch on
    ``.device``, a hook that keeps its value's device: right on a GPU, so right here."""
    run_ranks(world_size, _case_rank, case)


@pytest.mark.parametrize("case", GPU_FAILS, ids=lambda f: f.__name__.strip("_"))
def test_what_cuda_refuses_fails_naming_it(world_size, case):
    """A CPU tensor of one or more dims in an op with GPU tensors, written in place from them, sent, set_ over GPU
    storage, indexed by a GPU index; ``.numpy()`` of a GPU tensor; in backward, a hook's host copy sent, a CPU
    gradient handed to autograd: each fails on a GPU, so each fails here, with the mode's StrayTensor."""
    with pytest.raises(RankFailure, match="StrayTensor"):
        run_ranks(world_size, _case_rank, case)
