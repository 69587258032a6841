"""Every figure the handouts show: file name in handouts/figures/ -> the function that draws it.

``python -m scripts.figures`` draws, from this table, the figures that the handouts present link (in a kit of
some parts: its parts' figures only), and a staff test checks the table against the handouts (every linked
image is here, everything here is linked). A new figure is a ``draw_x(path) -> path`` function in its part's
module and one line below.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from scripts.figures import (
    checkpoint,
    collectives,
    context_parallel,
    expert_parallel,
    fault_tolerance,
    mesh,
    parallelize,
    pipeline,
    tensor_parallel,
    zero,
)

FIGURES: dict[str, Callable[[Path], Path]] = {
    "ring_reduce_scatter_all_gather.png": collectives.draw_ring,  # 01-collectives
    "recursive_doubling.png": collectives.draw_recursive_doubling,
    "zero_stages.png": zero.draw_zero,  # 03-zero
    "fsdp_timeline.png": zero.draw_fsdp,
    "tp_mlp_f_g.png": tensor_parallel.draw_tp,  # 04-tensor-parallel
    "gpipe_vs_1f1b.png": pipeline.draw_gpipe_vs_1f1b,  # 05-pipeline
    "pipeline_schedules.png": pipeline.draw_schedules,
    "pipeline_v_placement.png": pipeline.draw_v_placement,  # 05-pipeline §5.7
    "pipeline_v_schedules.png": pipeline.draw_v_schedules,  # 05-pipeline §5.7-5.8
    "mesh_groups.png": mesh.draw_mesh_groups,  # 07-mesh
    "mesh_3d.png": mesh.draw_3d,
    "hsdp_vs_fsdp.png": mesh.draw_hsdp,
    "placement_bandwidth.png": mesh.draw_placement,
    "expert_parallel_dispatch.png": expert_parallel.draw_dispatch,  # 08-expert-parallel
    "ring_attention.png": context_parallel.draw_ring_attention,  # 09-context-parallel
    "checkpoint_protocol.png": checkpoint.draw_protocol,  # 10-failures
    "checkpoint_resharding.png": checkpoint.draw_resharding,
    "fault_tolerance_recovery.png": fault_tolerance.draw_recovery,
    "capstone_mesh_blocks.png": parallelize.draw_mesh_blocks,  # 11-capstone
    "capstone_step_timeline.png": parallelize.draw_step_timeline,
}

IMAGE = re.compile(r"!\[[^\]]*\]\((?:\./)?figures/([^)\s]+)\)")  # ![caption](figures/x.png) in a handout


def linked_figures(handouts: Path) -> list[str]:
    """The figures of FIGURES that the part handouts in ``handouts`` (``NN-*.md``) link, in FIGURES' order: all
    of them in the whole kit, a kit's own parts' in a kit of some parts (its other handouts are not there)."""
    linked = {name for h in handouts.glob("[0-9][0-9]-*.md") for name in IMAGE.findall(h.read_text())}
    return [name for name in FIGURES if name in linked]
