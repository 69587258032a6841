"""Staff mutants of Task 11.4's planner (reference_solutions/accounting.py, ``plan_capstone``): what the public
tests must catch.

Collected by table.py (``_collect_area_tables``); run them with ``pytest tests/staff/mutants -k planner_``.
"""

from __future__ import annotations

from functools import partial

from tests.staff.mutants.table import Check, Mutant

# Pure functions in one rank; a rank may spend seconds importing torch on a loaded machine.
PLAN = partial(Check, "tests/test_parallelize_accounting.py", "plan_capstone", world_sizes="1", deadline=30)

MUTANTS = [
    Mutant(
        "planner_pipeline_need_not_fill",
        "accounting",
        "a pipeline may have fewer microbatches than stages: Llama 3 at 128k pipelines 64 deep instead of using CP",
        old="if pp > 1 and m < pp:",
        new="if pp > 1 and m < 1:",
        caught_by=PLAN(expect=("published", "the rules choose")),
    ),
    Mutant(
        "planner_zero_over_dp_only",
        "accounting",
        "ZeRO shards the model states over dp only, not over the dp * cp ranks that hold the same weights",
        old="sizes = dict(dp=dp * cp, tp=tp, pp=pp, zero_stage=zero, num_microbatches=m, ep=ep)",
        new="sizes = dict(dp=dp, tp=tp, pp=pp, zero_stage=zero, num_microbatches=m, ep=ep)",
        caught_by=PLAN(expect=("published", "the rules choose", "memory_per_rank")),
    ),
    Mutant(
        "planner_cp_keeps_the_whole_sequence",
        "accounting",
        "the memory of a cp rank is computed for the whole sequence, not its seq / cp tokens",
        old="memory = parallel_memory_per_rank(n, layers, h, a, s // cp, mb, recompute=recompute,",
        new="memory = parallel_memory_per_rank(n, layers, h, a, s, mb, recompute=recompute,",
        caught_by=PLAN(expect=("published", "the rules choose")),
    ),
    Mutant(
        "planner_zero3_before_cp",
        "accounting",
        "CP is tried before ZeRO-3: a wider cp with ZeRO 0-2 wins over ZeRO-3 without CP",
        old=(
            "    for cp in cps:  # rule 4: the whole search at each cp before a wider one\n"
            "        for stages in ((0, 1, 2), (3,)):  # rule 3\n"
        ),
        new="    for stages in ((0, 1, 2), (3,)):\n        for cp in cps:\n",
        caught_by=PLAN(expect=("the rules choose", "no row")),
    ),
    Mutant(
        "planner_widest_ep",
        "accounting",
        "the experts are spread as wide as possible (the largest ep), not as narrow as fits",
        old="for ep, zero in ((ep, zero) for ep in eps for zero in stages):",
        new="for ep, zero in ((ep, zero) for ep in eps[::-1] for zero in stages):",
        caught_by=PLAN(expect="the rules choose"),
    ),
    Mutant(
        "planner_ep_inside_dp_only",
        "accounting",
        "ep must divide dp, forgetting that the cp ranks hold the same dense weights too",
        old="eps = [d for d in range(1, dp * cp + 1) if dp * cp % d == 0 and max(e, 1) % d == 0]",
        new="eps = [d for d in range(1, dp + 1) if dp % d == 0 and max(e, 1) % d == 0]",
        caught_by=PLAN(expect="the rules choose"),
    ),
    Mutant(
        "planner_moe_tokens_of_the_cp_rank",
        "accounting",
        "the all-to-all carries the cp rank's tokens, not this tp rank's own (sequence-parallel) share",
        old="tokens = m * mb * s // (cp * tp)",
        new="tokens = m * mb * s // cp",
        caught_by=PLAN(expect="bytes_per_axis['ep']"),
    ),
    Mutant(
        "planner_drops_rows_rejected_for_the_batch",
        "accounting",
        "the layouts rule 2 rejects because dp * microbatch does not divide the batch leave no row",
        old='rows.append({**row, "rejected": rejected[0], "reason": rejected[1]})',
        new='rows += [{**row, "rejected": rejected[0], "reason": rejected[1]}] if rejected[0] != "batch" else []',
        caught_by=PLAN(expect="missing"),
    ),
    Mutant(
        "planner_rejections_in_words_only",
        "accounting",
        "a row rejected by rule 2 says why in its reason only, without the rejected field tools read",
        old='rows.append({**row, "rejected": rejected[0], "reason": rejected[1]})',
        new='rows.append({**row, "reason": rejected[1]})',
        caught_by=PLAN(expect="never both nor neither"),
    ),
    Mutant(
        "planner_split_labelled_as_batch",
        "accounting",
        "a layout whose seq / cp does not split over tp is labelled rejected for the batch",
        old='return "split", f"seq / cp = {seq // cp} does not split over tp"',
        new='return "batch", f"seq / cp = {seq // cp} does not split over tp"',
        caught_by=PLAN(expect="unexpected"),
    ),
]
