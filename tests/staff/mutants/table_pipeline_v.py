"""Staff mutants of Tasks 5.7-5.8 beyond table.py's: DualPipeV's overlap, and what the V tests must show.

Collected by table.py (``_collect_area_tables``); run one with ``pytest tests/staff/mutants -k <id>``.
"""

from __future__ import annotations

from tests.staff.mutants.table import PIPELINE_V, Check, Mutant

PAIR = "::test_dualpipe_v_pair_posts_its_backwards_gradient_receive_before_its_forward_runs"

MUTANTS = [
    Mutant(
        "pipeline_dualpipev_pair_recv_after_forward",
        "pipeline",
        "an F&B pair posts its B's gradient receive only after the F ran (with the F's sends), so nothing overlaps",
        old="for action in upcoming[: 2 if upcoming and upcoming[0].overlap else 1]:",
        new="for action in upcoming[:1]:",
        caught_by=(
            PIPELINE_V(PAIR, "posts its B's gradient receive before the F runs", world_sizes="2"),
            PIPELINE_V(PAIR, "posts its B's gradient receive before the F runs", world_sizes="3"),
            Check(
                "tests/staff/hidden/test_pipeline_v_hidden.py",
                "::test_dualpipe_v_pairs_post_early_over_three_ranks_with_an_odd_count",
                "posts its B's gradient receive before the F runs",
                names=("rank",),
            ),
        ),
    ),
    Mutant(
        "pipeline_v_receives_in_needed_order_crossed",
        "pipeline",
        "receives posted in the order this rank needs them: ZB-V's crossing messages now show as CrossedMessages "
        "(every chunk boundary of the public V model has its own width), not as wrong gradients",
        old="item = step.inbox[peer].pop(0)",
        new=(
            "item = step.inbox[peer].pop(step.inbox[peer].index(message) if not any(x[0] == 'header' for x in "
            "step.inbox[peer][: step.inbox[peer].index(message)]) else 0)"
        ),
        caught_by=PIPELINE_V("trains_like_one_process and zb-v and not checkpoint", "CrossedMessages"),
    ),
]
