"""The device corpus: variants of the reference, each labelled with what NCCL on GPUs does with it (staff only).

Issue 53: device-faithful mode (tests/harness/device_faithful.py) must fail on a laptop what a GPU run fails,
and pass what it passes. Each row here is one edit of the reference that moves a tensor between the rank's GPU
and the CPU, or makes one without ``device=``, written after reasoning about what CUDA accepts and refuses,
with its label and why:

- ``gpu="pass"``: right on GPUs (a CPU tensor only in bookkeeping, a copy into a GPU tensor, a 0-dim CPU
  scalar, a device spelled another way, a tensor moved before it meets the rank's): its slice of the suite
  must PASS in device-faithful mode;
- ``gpu="fail"``: NCCL or CUDA refuses it (a CPU tensor in a collective, mixed with GPU tensors in an op,
  written in place from them, a CPU gradient handed to autograd for a GPU input, ``.numpy()`` of a GPU
  tensor): its slice must FAIL, with the mode's message (``StrayTensor``), not a wrong number.

The rows join the mutant table (``pytest tests/staff/mutants -k device_`` runs them: CI does, beside the other
mutants). Part 6 (accounting) has no tensors, so no row. On a lent GPU, ``python -m tests.staff.mutants.device_corpus``
runs every row on NCCL at world size 1 and prints each disagreement with its label (scripts/grading/gpu_check.sh).
"""

from __future__ import annotations

from tests.staff.mutants.table import Check, Mutant

# What the mode says when it refuses a tensor (tests/harness/stray_tensors.py).
REFUSED = ("StrayTensor",)


def variant(name: str, module: str, gpu: str, why: str, old: str, new: str, suite: str, select: str,
            world_sizes: str = "2", count: int = 1) -> Mutant:  # fmt: skip
    """A corpus row: the edit, its label (``gpu``: "pass" or "fail" on NCCL), why, and the slice that shows it."""
    assert gpu in ("pass", "fail"), gpu
    check = Check(suite, select, expect=() if gpu == "pass" else REFUSED, world_sizes=world_sizes, deadline=30,
                  passes=gpu == "pass", options=("--device-faithful",))  # fmt: skip
    return Mutant(f"device_{name}", module, f"[NCCL: {gpu}] {why}", old, new, check, count=count)


COLLECTIVES = "tests/test_collectives.py"
DDP = "tests/test_ddp.py"
ZERO = "tests/test_sharded_optimizer.py"
FSDP = "tests/test_fsdp.py"
TP = "tests/test_tensor_parallel.py"
PIPELINE = "tests/test_pipeline.py"
MESH = "tests/test_mesh.py"
EP = "tests/test_expert_parallel.py"
CP = "tests/test_context_parallel.py"
CKPT = "tests/test_checkpoint.py"
FT = "tests/test_fault_tolerance.py"
CAPSTONE = "tests/test_parallelize.py"

GATHER_OUT = (
    "    out = torch.empty((len(ranks) * piece.shape[0], *piece.shape[1:]), dtype=tensor.dtype, device=tensor.device)"
)
GATHER_TEST = "all_gather_concatenates and float32"
A2A_TEST = "all_to_all_delivers"
DDP_TEST = "::test_sgd_steps_match_one_process_on_the_whole_batch"
FSDP_TEST = "training_matches_a_plain_model"
SP_TEST = "sequence_parallel_mlp_matches"
TP_TEST = "tp_mlp_matches_the_dense"
PIPE_TEST = "pipeline_training_matches"
EP_TEST = "moe_matches_the_dense"
RING_FORWARD = "ring_attention_forward_matches"
RING_BACKWARD = "ring_attention_gradients_match"
REPLICA = "replaced_replica"

MUTANTS = [
    # -- Part 1: collectives ---------------------------------------------------------------------------------
    variant("gather_out_on_cpu", "collectives", "fail",
            "all_gather's output made without device=: its chunks receive from the neighbour on the CPU",
            GATHER_OUT, GATHER_OUT.replace(", device=tensor.device", ""), COLLECTIVES, GATHER_TEST),
    variant("gather_out_device_as_string", "collectives", "pass",
            "all_gather's output on device=str(tensor.device) ('cuda:0'): the same device, spelled as a string",
            GATHER_OUT, GATHER_OUT.replace("device=tensor.device", "device=str(tensor.device)"), COLLECTIVES,
            GATHER_TEST),
    variant("gather_out_moved", "collectives", "pass",
            "all_gather's output made on the CPU, then moved with .to(tensor.device) before any message",
            GATHER_OUT, GATHER_OUT.replace(", device=tensor.device)", ").to(tensor.device)"), COLLECTIVES,
            GATHER_TEST),
    variant("gather_bookkeeping_tolist", "collectives", "pass",
            "all_gather checks its rank order with torch.arange(n).tolist(): a CPU tensor only read on the host",
            GATHER_OUT, "    assert torch.arange(len(ranks)).tolist() == list(range(len(ranks)))\n" + GATHER_OUT,
            COLLECTIVES, GATHER_TEST),
    variant("ring_scratch_on_cpu", "collectives", "fail",
            "the pipelined ring's receive buffers made without device=",
            "scratch = [torch.empty(size, dtype=target.dtype, device=target.device) for _ in range(slots)]",
            "scratch = [torch.empty(size, dtype=target.dtype) for _ in range(slots)]", COLLECTIVES,
            "all_reduce_sums_in_place and float32"),
    variant("avg_by_cpu_scalar", "collectives", "pass",
            "the ring's average divides by torch.tensor(n), a 0-dim CPU tensor: CUDA takes it as a scalar input",
            "            chunks[me].div_(n)", "            chunks[me].div_(torch.tensor(n))", COLLECTIVES,
            "all_reduce_avg_divides"),
    variant("a2a_size_buffer_on_cpu", "collectives", "fail",
            "all_to_all receives each piece's size into torch.empty(1, dtype=torch.int64), on the CPU",
            "size_in = torch.empty(1, dtype=torch.int64, device=device)", "size_in = torch.empty(1, dtype=torch.int64)",
            COLLECTIVES, A2A_TEST),
    variant("a2a_size_moved", "collectives", "pass",
            "all_to_all builds each size on the CPU and moves it with .to(device) before sending it",
            "size_out = torch.tensor([tensors[to].shape[0]], dtype=torch.int64, device=device)",
            "size_out = torch.tensor([tensors[to].shape[0]], dtype=torch.int64).to(device)", COLLECTIVES, A2A_TEST),
    variant("a2a_size_read_on_host", "collectives", "pass",
            "all_to_all reads a received size with .cpu().tolist(): a copy to the host, read there",
            "(int(size_in.item()), *rest)", "(size_in.cpu().tolist()[0], *rest)", COLLECTIVES, A2A_TEST),
    # -- Part 2: DDP -----------------------------------------------------------------------------------------
    variant("bucket_buffer_made_in_hook_on_cpu", "ddp", "fail",
            "DDPBucketed packs a bucket, in its gradient hook, into a fresh torch.zeros(n) made without device=",
            "            torch.cat([p.grad.reshape(-1) for p in bucket.params], out=bucket.buffer)",
            "            bucket.buffer = torch.zeros(bucket.offsets[-1], dtype=bucket.buffer.dtype)\n"
            "            torch.cat([p.grad.reshape(-1) for p in bucket.params], out=bucket.buffer)", DDP, DDP_TEST),
    variant("bucket_all_reduced_as_host_copy", "ddp", "fail",
            "DDPBucketed all-reduces a .cpu() copy of its bucket (during backward)",
            "        bucket.work = dist.all_reduce(bucket.buffer, group=self.group, async_op=True)",
            "        bucket.buffer = bucket.buffer.cpu()\n"
            "        bucket.work = dist.all_reduce(bucket.buffer, group=self.group, async_op=True)", DDP, DDP_TEST),
    variant("bucket_average_by_cpu_scalar", "ddp", "pass",
            "DDPBucketed divides a bucket by torch.tensor(world_size), a 0-dim CPU scalar",
            "            b.buffer.div_(self.world_size)", "            b.buffer.div_(torch.tensor(self.world_size))",
            DDP, DDP_TEST),
    variant("broadcast_at_construction_alone", "ddp", "pass",
            "DDP broadcasts rank 0's parameters at construction even in a group of one, as torch's DDP does",
            "    if dist.get_world_size(group) == 1:\n        return\n    src = dist.get_process_group_ranks",
            "    src = dist.get_process_group_ranks", DDP, "bucket_layout", world_sizes="1"),
    variant("overlap_all_reduces_host_copy", "ddp", "fail",
            "overlapped DDP all-reduces p.grad.cpu() in its post-accumulate hook",
            "self._pending.append((dist.all_reduce(p.grad, group=self.group, async_op=True), p))",
            "self._pending.append((dist.all_reduce(p.grad.cpu(), group=self.group, async_op=True), p))", DDP,
            DDP_TEST),
    variant("overlap_hook_moves_grad_to_its_device", "ddp", "pass",
            "overlapped DDP's hook first moves p.grad to p.device (where it is already): nothing moves",
            "        self._pending.append((dist.all_reduce(p.grad, group=self.group, async_op=True), p))",
            "        p.grad = p.grad.to(p.device)\n"
            "        self._pending.append((dist.all_reduce(p.grad, group=self.group, async_op=True), p))", DDP,
            DDP_TEST),
    variant("tensor_hook_returns_host_copy", "ddp", "fail",
            "overlapped DDP registers a tensor hook that returns grad.cpu() (CUDA: a hook changed its value's device)",
            "                p.register_post_accumulate_grad_hook(self._launch_all_reduce)",
            "                p.register_hook(lambda g: g.cpu())\n"
            "                p.register_post_accumulate_grad_hook(self._launch_all_reduce)", DDP, DDP_TEST),
    variant("tensor_hook_returns_same_device", "ddp", "pass",
            "overlapped DDP registers a tensor hook that returns g.to(p.device): the same device",
            "                p.register_post_accumulate_grad_hook(self._launch_all_reduce)",
            "                p.register_hook(lambda g, p=p: g.to(p.device))\n"
            "                p.register_post_accumulate_grad_hook(self._launch_all_reduce)", DDP, DDP_TEST),
    # -- Part 3: ZeRO and FSDP -------------------------------------------------------------------------------
    variant("zero2_reduce_scatter_output_on_cpu", "sharded_optimizer", "fail",
            "ZeRO-2 reduce-scatters into torch.empty(slot) made without device=",
            "chunk = torch.empty(slot, dtype=like.dtype, device=like.device)  # (slot,): my averaged grads",
            "chunk = torch.empty(slot, dtype=like.dtype)  # (slot,): my averaged grads", ZERO, "stage2_averages"),
    variant("zero2_device_as_index", "sharded_optimizer", "pass",
            "ZeRO-2's flat gradient buffer on device=like.get_device() if like.is_cuda else 'cpu': the GPU's index",
            "full = torch.zeros(self._world * slot, dtype=like.dtype, device=like.device)  # (N * slot,)",
            "full = torch.zeros(self._world * slot, dtype=like.dtype,\n"
            "                           device=like.get_device() if like.is_cuda else 'cpu')  # (N * slot,)", ZERO,
            "stage2_averages"),
    variant("fsdp_reduce_scatter_input_on_cpu", "fsdp", "fail",
            "FSDP packs a gradient, in backward, into torch.zeros(...) made without device=, and reduce-scatters it",
            "padded = torch.zeros(self.world * self.chunk, dtype=dtype, device=grad.device)",
            "padded = torch.zeros(self.world * self.chunk, dtype=dtype)", FSDP, FSDP_TEST),
    variant("fsdp_reduce_scatter_output_on_cpu", "fsdp", "fail",
            "FSDP reduce-scatters, in backward, into torch.empty(chunk) made without device=",
            "chunk = torch.empty(self.chunk, dtype=dtype, device=grad.device)",
            "chunk = torch.empty(self.chunk, dtype=dtype)", FSDP, FSDP_TEST),
    variant("fsdp_gather_device_as_string", "fsdp", "pass",
            "FSDP gathers into a buffer on device=str(shard.device)",
            "full = torch.empty(self.world * self.chunk, dtype=dtype, device=shard.device)",
            "full = torch.empty(self.world * self.chunk, dtype=dtype, device=str(shard.device))", FSDP, FSDP_TEST),
    variant("fsdp_backward_returns_cpu_gradient", "fsdp", "fail",
            "FSDP's Function.backward returns the input's gradient on the CPU (CUDA: invalid gradient, wrong device)",
            "grad_x = (grad_y @ weight).to(x.dtype) if ctx.needs_input_grad[0] else None",
            "grad_x = (grad_y @ weight).to(x.dtype).cpu() if ctx.needs_input_grad[0] else None", FSDP, FSDP_TEST),
    variant("fsdp_shard_kept_on_cpu", "fsdp", "fail",
            "FSDP cuts each shard out of torch.zeros(...) made without device=: the flat shards live on the CPU",
            "padded = torch.zeros(self.world * self.chunk, dtype=full.dtype, device=full.device)",
            "padded = torch.zeros(self.world * self.chunk, dtype=full.dtype)", FSDP, FSDP_TEST),
    # -- Part 4: tensor parallelism --------------------------------------------------------------------------
    variant("sp_gather_output_on_cpu", "tensor_parallel", "fail",
            "sequence parallelism all-gathers into torch.empty(...) made without device=",
            "    out = torch.empty((_world(group) * x.shape[0], *x.shape[1:]), dtype=x.dtype, device=x.device)",
            "    out = torch.empty((_world(group) * x.shape[0], *x.shape[1:]), dtype=x.dtype)", TP, SP_TEST),
    variant("sp_reduce_scatter_device_as_index", "tensor_parallel", "pass",
            "sequence parallelism's reduce-scatter output on device=x.get_device() if x.is_cuda else 'cpu'",
            "    out = torch.empty((x.shape[0] // _world(group), *x.shape[1:]), dtype=x.dtype, device=x.device)",
            "    out = torch.empty((x.shape[0] // _world(group), *x.shape[1:]), dtype=x.dtype,\n"
            "                      device=x.get_device() if x.is_cuda else 'cpu')", TP, SP_TEST),
    variant("tp_backward_returns_cpu_gradient", "tensor_parallel", "fail",
            "f's backward (all-reduce) hands autograd the summed gradient on the CPU",
            "        return _all_reduce(grad, ctx.group), None",
            "        return _all_reduce(grad, ctx.group).cpu(), None", TP, TP_TEST),
    variant("tp_all_reduce_host_copy", "tensor_parallel", "fail",
            "TP's all-reduce sums a .cpu() copy instead of a clone on the rank's device",
            "    out = x.contiguous().clone()", "    out = x.contiguous().cpu()", TP, TP_TEST),
    # -- Part 5: pipelines -----------------------------------------------------------------------------------
    variant("header_shape_from_cpu", "pipeline", "pass",
            "the shape header's slots filled from torch.tensor(out.shape) made without device=: a copy into a "
            "GPU tensor (the independent implementation of issue 53)",
            "header[2 : 2 + out.dim()] = torch.tensor(out.shape, dtype=torch.int64, device=out.device)",
            "header[2 : 2 + out.dim()] = torch.tensor(out.shape, dtype=torch.int64)", PIPELINE, PIPE_TEST),
    variant("header_on_cpu", "pipeline", "fail",
            "the shape header itself made without device=, then sent",
            "header = torch.zeros(_MAX_DIMS + 2, dtype=torch.int64, device=out.device)",
            "header = torch.zeros(_MAX_DIMS + 2, dtype=torch.int64)", PIPELINE, PIPE_TEST),
    variant("header_read_on_host", "pipeline", "pass",
            "a received header read with header.cpu().tolist()",
            "dtype_code, ndim, *dims = header.tolist()", "dtype_code, ndim, *dims = header.cpu().tolist()",
            PIPELINE, PIPE_TEST),
    variant("running_loss_on_cpu", "pipeline", "fail",
            "the step's running loss kept in a 0-dim CPU tensor, total_loss += loss (CUDA: a CPU output of a GPU op)",
            "total_loss=torch.zeros((), dtype=torch.float64, device=device),",
            "total_loss=torch.zeros((), dtype=torch.float64),", PIPELINE, PIPE_TEST),
    variant("receive_buffer_moved", "pipeline", "pass",
            "a receive buffer made on the CPU and moved with .to(step.device) before the receive",
            "        return torch.empty(shape, dtype=dtype, device=step.device)",
            "        return torch.empty(shape, dtype=dtype).to(step.device)", PIPELINE, PIPE_TEST),
    # -- Part 7: the mesh ------------------------------------------------------------------------------------
    variant("mesh_grid_without_device", "mesh", "pass",
            "the mesh's rank grid made with torch.arange(world) and no device=: bookkeeping read with .tolist()",
            'grid = torch.arange(world, device="cpu").view(*shape.values())',
            "grid = torch.arange(world).view(*shape.values())", MESH, "mesh_slices", world_sizes="4"),
    variant("hsdp_all_reduces_host_copy", "mesh", "fail",
            "HSDP's hook all-reduces p.grad.cpu() across replicas (during backward)",
            "        dist.all_reduce(p.grad, group=self.replicate_group)",
            "        dist.all_reduce(p.grad.cpu(), group=self.replicate_group)", MESH, "hsdp_training_matches",
            world_sizes="4"),
    # -- Part 8: expert parallelism --------------------------------------------------------------------------
    variant("moe_positions_on_cpu", "expert_parallel", "fail",
            "the MoE's slot positions made with torch.arange(k * n) and no device=, minus a GPU tensor",
            "position = torch.arange(k * n, device=x.device) - start[group_id]",
            "position = torch.arange(k * n) - start[group_id]", EP, EP_TEST),
    variant("all_to_all_backward_host_copy", "expert_parallel", "fail",
            "the all-to-all's backward exchanges grad.cpu()",
            "        return _exchange(grad, input_splits, output_splits, ctx.group), None, None, None",
            "        return _exchange(grad.cpu(), input_splits, output_splits, ctx.group), None, None, None", EP,
            "all_to_all_tokens_delivers"),
    variant("moe_splits_read_on_host", "expert_parallel", "pass",
            "the MoE reads its input splits with .cpu().tolist()",
            "input_splits = per_rank[_rank(self.group)].tolist()",
            "input_splits = per_rank[_rank(self.group)].cpu().tolist()", EP, EP_TEST),
    # -- Part 9: context parallelism -------------------------------------------------------------------------
    variant("ring_mask_left_on_cpu", "context_parallel", "fail",
            "ring attention masks GPU scores with a CPU mask of one or more dims (no .to(scores.device))",
            'scores = scores.masked_fill(hidden.to(scores.device), float("-inf"))',
            'scores = scores.masked_fill(hidden, float("-inf"))', CP, RING_FORWARD),
    variant("cp_positions_without_device", "context_parallel", "pass",
            "a rank's block positions made with torch.arange(...) and no device=: CPU bookkeeping, as documented",
            "        return torch.arange(index * local_len, (index + 1) * local_len, device=\"cpu\")",
            "        return torch.arange(index * local_len, (index + 1) * local_len)", CP, RING_FORWARD),
    variant("ring_output_on_cpu", "context_parallel", "fail",
            "ring attention's output accumulator made without device=",
            "out = torch.zeros(batch, heads, s, v.shape[-1], dtype=acc, device=q.device)",
            "out = torch.zeros(batch, heads, s, v.shape[-1], dtype=acc)", CP, RING_FORWARD),
    variant("ring_backward_key_grad_on_cpu", "context_parallel", "fail",
            "ring attention's backward accumulates dK in torch.zeros(...) made without device=",
            "dk = torch.zeros(k_cur.shape, dtype=acc, device=k.device)", "dk = torch.zeros(k_cur.shape, dtype=acc)",
            CP, RING_BACKWARD),
    # -- Part 10: checkpoints and failures -------------------------------------------------------------------
    variant("checkpoint_bytes_through_cpu_method", "checkpoint", "pass",
            "a box's bytes taken with .cpu() instead of .to('cpu')",
            'flat = t.detach().to("cpu").contiguous().reshape(-1)', "flat = t.detach().cpu().contiguous().reshape(-1)",
            CKPT, "save_writes_each_box_once", world_sizes="2"),
    variant("async_staging_device_object", "checkpoint", "pass",
            "asynchronous staging copies to torch.device('cpu') (an object, not the string)",
            'staged[key] = value.detach().to("cpu", copy=True)',
            'staged[key] = value.detach().to(torch.device("cpu"), copy=True)', CKPT, "async_save_copies_plain",
            world_sizes="2"),
    variant("replica_sends_host_copy", "fault_tolerance", "fail",
            "the state transfer sends each tensor's .cpu() copy",
            "dist.send(t.detach().to(device).contiguous(), dst, group=group)",
            "dist.send(t.detach().cpu().contiguous(), dst, group=group)", FT, REPLICA),
    variant("replica_header_not_moved", "fault_tolerance", "fail",
            "the state transfer sends its pickled header from torch.frombuffer without .to(device)",
            "blob = torch.frombuffer(bytearray(pickle.dumps(header)), dtype=torch.uint8).to(device)",
            "blob = torch.frombuffer(bytearray(pickle.dumps(header)), dtype=torch.uint8)", FT, REPLICA),
    variant("replica_header_numpy_on_device", "fault_tolerance", "fail",
            "the receiver unpickles blob.numpy() of its GPU buffer (CPU-only op)",
            "header = pickle.loads(blob.cpu().numpy().tobytes())", "header = pickle.loads(blob.numpy().tobytes())",
            FT, REPLICA),
    variant("replica_compares_device_types", "fault_tolerance", "pass",
            "the receiver reuses its tensor when mine.device.type == device.type",
            "into = mine if fits and mine.device == device and mine.is_contiguous() else None",
            "into = mine if fits and mine.device.type == device.type and mine.is_contiguous() else None", FT,
            REPLICA),
    variant("replica_step_to_cpu_device_object", "fault_tolerance", "pass",
            "a received AdamW step (0-dim) kept on torch.device('cpu'), where AdamW keeps it on a GPU run too",
            'mine[entry] = value.to(p.device if value.dim() else "cpu", copy=True)',
            'mine[entry] = value.to(p.device if value.dim() else torch.device("cpu"), copy=True)', FT, REPLICA),
    # -- Part 11: the capstone -------------------------------------------------------------------------------
    variant("rope_positions_without_device", "parallelize", "pass",
            "the RoPE positions made with torch.arange(s) and no device=: a CPU input the rotation moves itself",
            'positions = torch.arange(s, device="cpu")', "positions = torch.arange(s)", CAPSTONE,
            "parallel_blocks_train_like_one_process"),
    variant("global_loss_on_cpu", "parallelize", "fail",
            "the step's loss all-reduced from torch.tensor([loss]) made without device=",
            "t = torch.tensor([loss], dtype=torch.float64, device=device)",
            "t = torch.tensor([loss], dtype=torch.float64)", CAPSTONE, "parallel_blocks_train_like_one_process"),
]  # fmt: skip
