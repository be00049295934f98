"""The chaos checker (integration_tests/chaos/checker.py) on synthetic histories: what it
counts lost, duplicated, out of order, and the times without service and without a master,
per fault; and the RELIABILITY.md section it feeds (report.py)."""

from __future__ import annotations

import pytest

from integration_tests.chaos.checker import (
    BEFORE_FAULTS,
    SEND_OK,
    Commit,
    FaultWindow,
    History,
    RoleSample,
    Send,
    Take,
    check,
    explain_lost,
    longest_gap,
    written_over_untaken,
)
from integration_tests.chaos.faults import Fault
from integration_tests.chaos.report import BEGIN, END, kept_section, with_section

KEYS = 8


def ok(t: float, body: str, attempt: int = 1) -> Send:
    return Send(t, body, attempt, "SEND_OK")


def history(sends: list[Send], takes: list[Take], faults: list[FaultWindow] | None = None,
            roles: list[RoleSample] | None = None, end: float = 100.0) -> History:
    return History(sends, takes, roles or [], faults or [FaultWindow("leader-kill", 50.0, 60.0)], end)


def test_every_acknowledged_body_taken_once_is_clean() -> None:
    sends = [ok(float(t), f"p-{t}") for t in range(100)]
    figures = check(history(sends, [Take(t.t + 0.5, t.body) for t in sends]), KEYS)
    assert {k: (f.acknowledged, f.lost, f.duplicated, f.out_of_order) for k, f in figures.items()} == {
        BEFORE_FAULTS: (50, 0, 0, 0), "leader-kill": (50, 0, 0, 0)}
    assert figures["leader-kill"].faults == 1 and figures[BEFORE_FAULTS].faults == 0


def test_an_acknowledged_body_never_taken_is_lost_in_the_window_of_its_ack() -> None:
    sends = [ok(10.0, "p-0"), ok(55.0, "p-1"), Send(56.0, "p-2", 1, "SLAVE_NOT_AVAILABLE")]
    figures = check(history(sends, [Take(11.0, "p-0")]), KEYS)
    assert figures[BEFORE_FAULTS].lost == 0
    assert (figures["leader-kill"].acknowledged, figures["leader-kill"].lost) == (1, 1)   # p-2: never SEND_OK


def test_duplicates_beyond_the_attempts_count_retried_copies_do_not() -> None:
    sends = [Send(55.0, "p-0", 1, "FLUSH_SLAVE_TIMEOUT"), ok(56.0, "p-0", 2), ok(57.0, "p-1")]
    takes = [Take(58.0, "p-0"), Take(58.1, "p-0"), Take(58.2, "p-1"), Take(58.3, "p-1")]
    assert check(history(sends, takes), KEYS)["leader-kill"].duplicated == 1   # p-1 sent once, taken twice


def test_a_message_taken_after_a_later_one_of_its_key_is_out_of_order() -> None:
    sends = [ok(55.0 + n / 10, f"p-{n}") for n in (0, 1, 8, 9)]
    takes = [Take(58.0, "p-8"), Take(58.1, "p-0"),        # key 0: 8 before 0
             Take(58.2, "p-1"), Take(58.3, "p-9"),        # key 1 in order
             Take(58.4, "p-8"), Take(58.5, "p-1")]        # repeats are duplicates, not disorder
    figures = check(history(sends, takes), KEYS)["leader-kill"]
    assert (figures.out_of_order, figures.lost, figures.duplicated) == (1, 0, 2)


def test_keys_are_per_producer() -> None:
    sends = [ok(55.0, "a-8"), ok(55.1, "b-0")]
    figures = check(history(sends, [Take(58.0, "a-8"), Take(58.1, "b-0")]), KEYS)
    assert figures["leader-kill"].out_of_order == 0


def test_max_unavailable_is_the_longest_time_without_send_ok_in_the_fault_window() -> None:
    times = [t / 10 for t in range(0, 1000) if not 520 < t < 600]     # OK at 52.0, then at 60.0
    sends = [ok(t, f"p-{n}") for n, t in enumerate(times)]
    sends.append(Send(55.0, "x-0", 1, "SLAVE_NOT_AVAILABLE"))           # answered, but not OK
    figures = check(history(sends, [Take(s.t, s.body) for s in sends]), KEYS)
    assert figures["leader-kill"].max_unavailable_s == pytest.approx(8.0)
    assert figures[BEFORE_FAULTS].max_unavailable_s == pytest.approx(0.1)


def test_time_without_master_ignores_a_deposed_master_still_answering() -> None:
    roles = [RoleSample(t / 4, "b0", "SYNC_MASTER", 1) for t in range(0, 400)]     # never stops saying so
    roles += [RoleSample(t / 4, "b1", "SYNC_MASTER", 2) for t in range(216, 400)]  # elected at 54 s
    roles += [RoleSample(t / 4, "b1", "SLAVE", 1) for t in range(0, 216)]
    sends = [ok(float(t), f"p-{t}") for t in range(100)]
    faults = [FaultWindow("master-partition", 50.0, 60.0), FaultWindow("leader-kill", 70.0, 75.0)]
    roles = [r for r in roles if not (r.member == "b1" and 75 <= r.t < 80)]   # the new master dies at 75
    figures = check(history(sends, [Take(s.t, s.body) for s in sends], faults, roles), KEYS)
    assert figures["master-partition"].max_without_master_s == pytest.approx(0.25)   # b0 until b1 took over
    assert figures["leader-kill"].max_without_master_s == pytest.approx(5.25)   # b0's epoch 1 is deposed


def test_faults_of_one_kind_add_up_and_keep_their_longest_times() -> None:
    sends = [ok(t / 10, f"p-{t}") for t in range(1000) if not 210 < t < 240 and not 610 < t < 700]
    faults = [FaultWindow("random-kill", 20.0, 25.0), FaultWindow("random-kill", 60.0, 65.0)]
    figures = check(history(sends, [Take(s.t, s.body) for s in sends[:-3]], faults), KEYS)["random-kill"]
    assert (figures.faults, figures.lost) == (2, 3)
    assert figures.max_unavailable_s == pytest.approx(9.0)


def test_longest_gap_counts_the_edges() -> None:
    assert longest_gap([], 1.0, 4.0) == 3.0
    assert longest_gap([2.0, 3.0, 9.0], 1.0, 4.0) == 1.0


def test_fault_names_are_checked() -> None:
    assert Fault.parse("leader-kill, bridge") == [Fault.LEADER_KILL, Fault.BRIDGE]
    assert Fault.parse("all") == list(Fault)
    with pytest.raises(ValueError, match="unknown chaos fault 'leader-kil' in RMQ_CHAOS_FAULTS"):
        Fault.parse("leader-kil")
    with pytest.raises(ValueError, match="names no fault"):
        Fault.parse(" , ")


def test_the_generated_section_is_replaced_and_the_rest_kept() -> None:
    text = "# rmq reliability figures\n\n| table |\n"
    first = with_section(text, f"{BEGIN}\nrun 1\n{END}")
    second = with_section(first, f"{BEGIN}\nrun 2\n{END}")
    assert second == f"{text}\n{BEGIN}\nrun 2\n{END}\n"
    assert kept_section(second) == f"{BEGIN}\nrun 2\n{END}" and kept_section(text) == ""


def test_a_lost_body_is_explained_by_what_was_taken_at_its_offset() -> None:
    sends = [Send(55.0, "p-0", 1, "SEND_OK", (2, 7), "chaos-a"),
             Send(56.0, "q-0", 1, "SLAVE_NOT_AVAILABLE", (2, 7), "chaos-a")]
    takes = [Take(57.0, "q-0", (2, 7), "chaos-a"),
             Take(57.5, "r-0", (2, 7), "chaos-b")]    # group B's queue 2: another queue
    assert explain_lost(history(sends, takes)) == [
        "p-0 (SEND_OK at t=55.00, chaos-a queue 2 offset 7): consumers took ['q-0'] there"]


def test_order_is_checked_per_queue_of_each_broker_group() -> None:
    """A key moved to another group's queue (its route changed) starts its order again there;
    within one queue a later message taken first is still out of order."""
    sends = [ok(50.0 + n, f"p-{n}") for n in (0, 8, 16)]
    takes = [Take(58.0, "p-8", (0, 1), "chaos-b"), Take(58.1, "p-0", (0, 1), "chaos-a"),   # other group
             Take(58.2, "p-16", (0, 2), "chaos-a")]
    assert sum(f.out_of_order for f in check(history(sends, takes), KEYS).values()) == 0
    takes = [Take(58.0, "p-8", (0, 1), "chaos-a"), Take(58.1, "p-0", (0, 1), "chaos-a"),   # same queue
             Take(58.2, "p-16", (0, 2), "chaos-a")]
    assert sum(f.out_of_order for f in check(history(sends, takes), KEYS).values()) == 1


def test_time_without_a_master_counts_each_broker_group() -> None:
    """Group B without a master for 10 s counts though group A's master answered throughout (epochs
    are per group: B's epoch 1 is not older than A's epoch 3)."""
    roles = [RoleSample(t / 4, "b0", "SYNC_MASTER", 3, "chaos-a") for t in range(0, 400)]
    gap = range(160, 200)       # 40-50 s: no master in group B
    roles += [RoleSample(t / 4, "c0", "SYNC_MASTER", 1, "chaos-b") for t in range(0, 400) if t not in gap]
    figures = check(history([ok(t, f"p-{t}") for t in range(100)],
                            [Take(t + 0.5, f"p-{t}") for t in range(100)], roles=roles), KEYS)
    assert figures[BEFORE_FAULTS].max_without_master_s == pytest.approx(10.25, abs=0.01)


def test_time_without_send_ok_per_group_counts_only_a_group_asked_and_refusing() -> None:
    """The producers wait on group B from 50 s to 58 s (it refuses) and send nothing to A
    meanwhile: no SEND_OK from anyone for 8 s, B refused for 8 s, but A, not asked, was not
    unavailable. A send's wait counts from when it was sent, not from when it was answered."""
    sends = [Send(t / 10, f"p-{t}", 1, SEND_OK, (0, t), "chaos-a", t / 10 - 0.01) for t in range(500)]
    sends += [Send(50.0 + n, "p-500", n + 1, "FLUSH_SLAVE_TIMEOUT", (1, 0), "chaos-b", 48.0 + n)
              for n in range(8)]    # each attempt answered 2 s after it was sent
    sends.append(Send(58.0, "p-500", 9, SEND_OK, (1, 1), "chaos-b", 57.9))
    sends += [Send(58.0 + t / 10, f"p-{501 + t}", 1, SEND_OK, (0, 500 + t), "chaos-a", 58.0 + t / 10 - 0.01)
              for t in range(1, 400)]
    figures = check(history(sends, [Take(s.t, s.body) for s in sends]), KEYS)["leader-kill"]
    assert figures.max_unavailable_s == pytest.approx(8.0)         # from the fault (50 s) to 58 s
    assert figures.group_unavailable_s == pytest.approx({"chaos-a": 0.01, "chaos-b": 8.0}, abs=0.001)
    assert figures.max_group_unavailable_s == pytest.approx(8.0)


def test_time_without_send_ok_after_the_heal_counts_only_past_the_heal() -> None:
    """Both members of group B killed at 50 s and restarted at 60 s (the heal): B refuses from
    50 s to its first SEND_OK at 64 s: 14 s in all, 4 s of them after the restart. A stretch that
    ended before the heal adds nothing after it."""
    sends = [Send(50.0 + n / 2, "p-1", n + 1, "RmqUnavailable", (1, 0), "chaos-b", 50.0 + n / 2 - 0.1)
             for n in range(28)]
    sends.append(Send(64.0, "p-1", 29, SEND_OK, (1, 0), "chaos-b", 63.9))
    sends += [Send(51.0, "p-2", 1, "RmqUnavailable", (0, 0), "chaos-a", 50.5),   # A: 1.5 s, before the heal
              Send(52.0, "p-2", 2, SEND_OK, (0, 0), "chaos-a", 51.9)]
    figures = check(history(sends, [Take(s.t, s.body) for s in sends if s.status == SEND_OK]),
                    KEYS)["leader-kill"]
    assert figures.group_unavailable_s == pytest.approx({"chaos-a": 1.5, "chaos-b": 14.0})
    assert figures.group_after_heal_s == pytest.approx({"chaos-a": 0.0, "chaos-b": 4.0})


def test_a_commit_past_an_acknowledged_body_not_yet_taken_is_counted() -> None:
    """Offsets committed are the next to consume: committing 3 on a queue passes offsets 0-2. A
    body at offset 1 taken only after that commit (or never) was skipped; one taken before it,
    or sitting at the committed offset itself, was not."""
    sends = [Send(50.0 + n, f"p-{n}", 1, SEND_OK, (0, n), "chaos-a") for n in range(4)]
    takes = [Take(54.0, "p-0", (0, 0), "chaos-a"), Take(58.0, "p-1", (0, 1), "chaos-a"),
             Take(54.1, "p-2", (0, 2), "chaos-a"), Take(54.2, "p-2", (0, 2), "chaos-b"),
             Take(58.1, "p-3", (0, 3), "chaos-a")]
    commits = [Commit(54.5, ("chaos-a", 0), 3), Commit(54.6, ("chaos-b", 0), 9),   # B's queue 0: another
               Commit(59.0, ("chaos-a", 0), 4)]
    checked = history(sends, takes)
    checked.commits = commits
    assert check(checked, KEYS)["leader-kill"].committed_unreceived == 1          # p-1 only
    checked.commits = [Commit(54.5, ("chaos-a", 0), 2), Commit(54.7, ("chaos-a", 0), 1)]   # went back
    assert check(checked, KEYS)["leader-kill"].committed_unreceived == 1          # p-1 passed at 54.5


def test_a_later_send_at_an_untaken_ones_offset_is_written_over_it() -> None:
    """The weakened run produces until the new master stored a message where the old master
    holds an acknowledged one no consumer took; one at a taken body's offset (the consumers read
    the old master's there, the new master's is only not yet taken) does not count."""
    old_master = [Send(55.0, "p-0", 1, "SEND_OK", (2, 7), "chaos-a"),
                  Send(55.1, "p-8", 1, "SEND_OK", (2, 8), "chaos-a")]
    taken_there = [Take(55.5, "p-0", (2, 7), "chaos-a")]
    new_master_at_7 = [*old_master, Send(58.0, "q-0", 1, "SEND_OK", (2, 7), "chaos-a")]
    assert not written_over_untaken(history(new_master_at_7, taken_there))
    new_master_at_8 = [*new_master_at_7, Send(58.1, "q-8", 1, "SEND_OK", (2, 8), "chaos-a")]
    assert written_over_untaken(history(new_master_at_8, taken_there))
    elsewhere = [*new_master_at_7, Send(58.1, "q-8", 1, "SEND_OK", (2, 8), "chaos-b"),   # group B
                 Send(58.2, "p-8", 2, "SEND_OK", (2, 8), "chaos-a")]                     # its retry
    assert not written_over_untaken(history(elsewhere, taken_there))
