"""Staff mutants of Tasks 10.5-10.6 beyond table.py's: the supervisor's policy and the detector's promises.

Collected by table.py (``_collect_area_tables``); run one with ``pytest tests/staff/mutants -k <id>``.
"""

from __future__ import annotations

from tests.staff.mutants.table import FT, FT_HIDDEN, Mutant

MUTANTS = [
    Mutant(
        "ft_spare_never_used_up",
        "fault_tolerance",
        "a spare replaces a failed rank but is never used up: every later failure gets a spare too",
        old="        spares -= replaced",
        new="        pass",
        caught_by=(
            FT("::test_supervise_uses_a_spare_up_once", "the spare is then used up", names=()),
            FT_HIDDEN("::test_two_spares_replace_two_losses_and_the_third_shrinks", "used up", names=()),
        ),
    ),
    Mutant(
        "ft_bug_restarted",
        "fault_tolerance",
        "a rank's own error (not a PeerFailure) is treated as a failure: the job is restarted instead of reported",
        old="        if bugs:",
        new="        if False:",
        caught_by=(
            FT("::test_supervise_reports_a_ranks_own_error_without_restarting", "yet supervise returned", names=()),
            FT_HIDDEN("::test_a_bug_beside_a_peer_failure_is_reported_not_restarted", "a bug", names=()),
        ),
    ),
    Mutant(
        "ft_failed_only_the_dead",
        "fault_tolerance",
        "the failed ranks are only those that died without a report; the ranks the survivors named are ignored",
        old="failed = {o.rank for o in outcomes if o.died} | {o.failure.dead_rank for o in outcomes if o.failure}",
        new="failed = {o.rank for o in outcomes if o.died}",
        caught_by=(
            FT("::test_the_failed_ranks_are_those_that_died_and_those_the_survivors_named", "the union", names=()),
            FT_HIDDEN("::test_failed_ranks_at_world_six_count_a_dead_and_named_rank_once", "the union", names=()),
        ),
    ),
    Mutant(
        "ft_failed_only_the_named",
        "fault_tolerance",
        "the failed ranks are only those the survivors named; a rank that died unnamed is counted healthy",
        old="failed = {o.rank for o in outcomes if o.died} | {o.failure.dead_rank for o in outcomes if o.failure}",
        new="failed = {o.failure.dead_rank for o in outcomes if o.failure}",
        caught_by=FT(
            "::test_the_failed_ranks_are_those_that_died_and_those_the_survivors_named", "the union", names=()
        ),  # fmt: skip
    ),
    Mutant(
        "ft_failed_counted_per_report",
        "fault_tolerance",
        "the failures are counted per report, so a rank that died and was named counts twice",
        old="failed = {o.rank for o in outcomes if o.died} | {o.failure.dead_rank for o in outcomes if o.failure}",
        new="failed = [o.rank for o in outcomes if o.died] + [o.failure.dead_rank for o in outcomes if o.failure]",
        caught_by=(
            FT(
                "::test_the_failed_ranks_are_those_that_died_and_those_the_survivors_named",
                "each counted once",
                names=(),
            ),  # fmt: skip
            FT_HIDDEN(
                "::test_failed_ranks_at_world_six_count_a_dead_and_named_rank_once", "each counted once", names=()
            ),  # fmt: skip
        ),
    ),
    Mutant(
        "ft_on_failure_outside_waiting",
        "fault_tolerance",
        "the heartbeat thread calls on_failure whenever a peer fails, even while the main thread waits for nothing",
        old="if found is not None and what is not None and not self._reported",
        new="if found is not None and not self._reported",
        caught_by=FT("::test_on_failure_is_called_once_and_only_while_the_main_thread_waits", "waited for nothing"),
    ),
    Mutant(
        "ft_on_failure_every_interval",
        "fault_tolerance",
        "the heartbeat thread calls on_failure at every interval while the failed peer stays failed",
        old="self._reported = True",
        new="pass",
        caught_by=FT("::test_on_failure_is_called_once_and_only_while_the_main_thread_waits", "once per failure"),
    ),
    Mutant(
        "ft_peer_failure_not_chained",
        "fault_tolerance",
        "the PeerFailure replaces the collective's error without chaining it (from None): its cause is lost",
        old="            raise PeerFailure(self.rank, found[0], found[1], what, found[2]) from error",
        new="            raise PeerFailure(self.rank, found[0], found[1], what, found[2]) from None",
        caught_by=FT("::test_waiting_turns_a_peer_error_into_a_peer_failure_and_a_hang_into_on_failure", "`from`"),
    ),
]
MUTANTS.append(
    Mutant(
        "ft_waiting_no_grace",
        "fault_tolerance",
        "waiting converts a collective's error only if a peer has failed already, without waiting for the notice",
        old="give_up = time.monotonic() + self.timeout + 2 * self.interval",
        new="give_up = time.monotonic()",
        # Every survivor of every job is a chance: a survivor whose heartbeat thread sees the notice first is fine.
        caught_by=FT("test_survivors_report_a_killed_rank or fsdp_restarts_smaller", "grace", world_sizes="2,4"),
    )
)
MUTANTS.append(
    Mutant(
        "ft_never_seen_peer_never_fails",
        "fault_tolerance",
        "a peer that never wrote a heartbeat is skipped, so a rank that died before its first beat is never noticed",
        old='if beat == "stopped":',
        new='if beat == "stopped" or beat is None:',
        caught_by=FT("::test_detector_fails_a_silent_peer_after_the_timeout_and_a_dead_one_at_once", "never wrote"),
    )
)
MUTANTS.append(
    Mutant(
        "ft_replica_sent_in_dict_order",
        "fault_tolerance",
        "send_replica_state sends the tensors in the dict's order, not in key order as promised",
        old="tensors = sorted((k, v) for k, v in state.items() if isinstance(v, torch.Tensor))",
        new="tensors = [(k, v) for k, v in state.items() if isinstance(v, torch.Tensor)]",
        caught_by=FT("test_a_replaced_replica_gets and w2", "in key order"),
    )
)
