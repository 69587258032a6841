"""Suite-wide options: which implementation, backend, world sizes and deadline.

    pytest tests/                                   # the student package, gloo, world sizes 1,2,4
    pytest tests/ --impl reference                  # the staff reference
    pytest tests/ --impl my_submission              # any importable package following the contract
    pytest tests/ --backend nccl --world-sizes 2,4,8   # graders, on an 8-GPU node
    pytest tests/ -m task1_5                        # one task of the handout

Each option has an environment variable with the same effect (CS336_IMPL, CS336_BACKEND,
CS336_WORLD_SIZES, CS336_DEADLINE); the command line wins. Defaults: tests/harness/defaults.py.
"""

from __future__ import annotations

import argparse
import os

import pytest

from tests.harness import defaults
from tests.harness.config import CONFIG, set_stand_in_gpus
from tests.harness.run import gpu_shortfall

# The environment's word before any session sets it: "1" on, "0" off, None (unset) on with gloo, off with nccl.
_DEVICE_FAITHFUL_AT_START = (
    None if os.environ.get(defaults.ENV_DEVICE_FAITHFUL) is None else defaults.env_device_faithful()
)

pytest_plugins = ["tests.harness.trace_plugin"]  # --comm-trace: one Chrome trace per test

# Task markers follow the handouts' numbering: part p, task t -> task{p}_{t}. One line per part.
TASKS = {
    1: 7,  # collectives: broadcast, reduce, all_gather, reduce_scatter, all_reduce, all_to_all, algorithms
    2: 4,  # DDP: naive, flat, per-parameter overlap, bucketed
    3: 4,  # ZeRO: stage 1, stage 2 (sharded_optimizer), stage 3 (fsdp), FSDP units and deferred sync
    4: 5,  # TP: conjugate functions, column, row, MLP, sequence parallel
    5: 8,  # pipeline: stages, schedules, train_step, interleaved 1F1B, ZB-H1, checkpointing, ZB-V, DualPipeV
    6: 4,  # accounting: memory, communication and bubbles, FLOPs and MFU, activations
    7: 5,  # mesh: ProcessMesh, HSDP, composed training, placement and planning, pick-the-scheme
    8: 4,  # expert parallelism: all_to_all_tokens, ExpertParallelMoE, EP x DP gradients, accounting
    9: 4,  # context parallelism: shard/unshard, ring attention forward, backward, accounting
    10: 7,  # failures: sharded save, resharding load, exact resume, async save, restart, live recovery, accounting
    11: 4,  # capstone: the parallel block, pieces and stages, the training step, accounting
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cs336", "cs336-systems harness")
    d = defaults
    options = [  # (option, default from the environment, help, extra arguments)
        ("--impl", d.env_impl(), f"student, reference, or an importable package name (default {d.DEFAULT_IMPL})", {}),
        ("--backend", d.env_backend(), f"gloo on CPU or nccl with rank r on cuda:r (default {d.DEFAULT_BACKEND})",
         {"choices": ["gloo", "nccl"]}),
        ("--world-sizes", d.env_world_sizes(),
         f"comma-separated world sizes for distributed tests (default {d.DEFAULT_WORLD_SIZES})", {}),
        ("--deadline", d.env_deadline(),
         f"seconds a distributed run may take before each rank's stack is shown (default {d.DEFAULT_DEADLINE_S:g})",
         {"type": float}),
        ("--device-faithful", _DEVICE_FAITHFUL_AT_START,
         "on gloo, judge as NCCL on GPUs would: the rank's tensors report cuda:rank, and a CPU tensor (made "
         "without device=, nn.Linear's weight, a .cpu() copy) fails where a GPU refuses it, in forward or backward "
         "(tests/harness/device_faithful.py; on by default with gloo, off with nccl; --no-device-faithful or "
         "CS336_DEVICE_FAITHFUL=0 turns it off). Asked "
         "for, it also stands for a node with one GPU per rank of the largest --world-sizes: a job of more ranks "
         "skips, or fails if a test starts it anyway", {"action": argparse.BooleanOptionalAction}),
        ("--p2p-matching", d.env_p2p_matching(),
         "tag-blind (default): send/recv follow NCCL's rule on gloo, tags ignored, and a receive matched with the "
         "wrong message fails naming both; tags: gloo's matching by tag (tests/harness/p2p_matching.py)",
         {"choices": ["tag-blind", "tags"]}),
        ("--comm-trace", os.environ.get("CS336_TRACE"),
         "directory: every CommRecorder writes a Chrome-trace JSON of its rank's calls there (tests/harness/trace.py)",
         {}),
    ]  # fmt: skip
    for name, default, help_text, extra in options:
        group.addoption(name, default=default, help=help_text, **extra)


def pytest_configure(config: pytest.Config) -> None:
    CONFIG.impl = defaults.resolve_impl(config.getoption("--impl"))
    CONFIG.backend = config.getoption("--backend")
    CONFIG.deadline = config.getoption("--deadline")
    # Ranks started later inherit these, so the workers agree with the parent.
    os.environ[defaults.ENV_IMPL] = CONFIG.impl
    os.environ[defaults.ENV_BACKEND] = CONFIG.backend
    # Read by the pool for each task (tests/harness/pool.py); set either way, for a pytest process that runs
    # several sessions (the staff suite server), where one session's option must not leak into the next.
    faithful = config.getoption("--device-faithful")
    faithful = CONFIG.backend == "gloo" if faithful is None else faithful  # costs ~nothing: on by default on gloo
    os.environ[defaults.ENV_DEVICE_FAITHFUL] = "1" if faithful else "0"
    # Asked for (not by default), the mode stands for a node with a GPU per rank of the largest world size: a job of
    # more ranks is skipped (tests/harness/run.py) or, started anyway, fails (tests/harness/stray_tensors.py). By
    # default, fixed-size tests and the jobs tests start run at any size on gloo, as before.
    asked = config.getoption("--device-faithful") and CONFIG.backend == "gloo"
    set_stand_in_gpus(max(_world_sizes(config), default=1) if asked else None)
    os.environ[defaults.ENV_P2P_MATCHING] = config.getoption("--p2p-matching")  # read by pool.py per task
    if config.getoption("--comm-trace"):  # read by tests/harness/trace.py when the ranks import it
        os.environ["CS336_TRACE"] = os.path.abspath(config.getoption("--comm-trace"))
    for part, count in TASKS.items():
        for task in range(1, count + 1):
            config.addinivalue_line("markers", f"task{part}_{task}: handout task {part}.{task}")
    for line in [
        "deadline(seconds): this test's distributed runs need at least this long (max with --deadline)",
        "world_sizes(*sizes, reason=...): the world sizes this test supports (intersected with --world-sizes); "
        "the reason (why only these) goes into the skip message",
        "harness: tests of the test harness itself (they do not exercise the student package)",
        "staff: staff-only tests; not shipped in the student release",
    ]:
        config.addinivalue_line("markers", line)


def _world_sizes(config: pytest.Config) -> list[int]:
    return [int(w) for w in str(config.getoption("--world-sizes")).split(",") if w.strip()]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize every test that takes ``world_size`` over the chosen sizes (ids w1, w2, ...)."""
    if "world_size" not in metafunc.fixturenames:
        return
    chosen = sizes = _world_sizes(metafunc.config)
    marker = metafunc.definition.get_closest_marker("world_sizes")
    why = "no chosen world size suits this test"
    if marker is not None:
        sizes = [w for w in sizes if w in marker.args]
        because = marker.kwargs.get("reason", "the sizes its checks are written for; others run elsewhere")
        why = (f"this test runs at world sizes {', '.join(map(str, marker.args))} only ({because}); "
               f"--world-sizes is {','.join(map(str, chosen))}")  # fmt: skip
    params = []
    for w in sizes:
        shortfall = gpu_shortfall(w)
        marks = [pytest.mark.skip(reason=shortfall)] if shortfall else []
        params.append(pytest.param(w, id=f"w{w}", marks=marks))
    if not params:
        params = [pytest.param(0, marks=pytest.mark.skip(reason=why))]
    metafunc.parametrize("world_size", params)


@pytest.fixture(autouse=True)
def _per_test_deadline(request: pytest.FixtureRequest):
    marker = request.node.get_closest_marker("deadline")
    saved = CONFIG.deadline
    if marker is not None:  # a slow test asks for more time; --deadline can still raise it further
        CONFIG.deadline = max(saved, float(marker.args[0]))
    yield
    CONFIG.deadline = saved


def pytest_sessionfinish(session: pytest.Session) -> None:
    from tests.harness import pool

    if not pool.KEEP_POOLS:  # a long-lived pytest process reuses them
        pool.shutdown_pools()
