"""Stories about budgets, packing, gang reservations, debug sessions, squatting and GPU types."""

import math
import subprocess
import sys
from dataclasses import replace

import pytest

from scheduling.policy import BudgetPolicy, NodeState, Reservation, Shortfall, Start, TeamState, decay
from scheduling.policy.usage import memory_s
from tests.policy.policy_builders import (
    HOUR,
    NOW,
    SCAVENGER,
    STANDARD,
    check_plan,
    flags,
    flat_teams,
    nodes,
    pend,
    preempts,
    releases,
    run,
    snap,
    starts,
)

policy = BudgetPolicy()


# ---- budgets ---------------------------------------------------------------------------------------------------
def test_spent_team_runs_only_as_scavenger_on_gpus_nobody_in_budget_wants():
    teams = flat_teams({"a": 1, "b": 1})
    teams = tuple(t if t.id != "lab/b" else TeamState("lab/b", "lab", 1, remaining_gpu_hours=0) for t in teams)
    s = snap(nodes(1, gpus=4), teams, pending=[pend("a0", "lab/a", 2), pend("b0", "lab/b", 1, submit=0),
                                              pend("b1", "lab/b", 1), pend("b2", "lab/b", 1)])
    plan = policy.plan(s)
    check_plan(s, plan)
    st = starts(plan)
    assert not st["a0"].scavenger
    assert {j for j in st if j.startswith("b")} == {"b0", "b1"} and st["b0"].scavenger and st["b1"].scavenger
    assert "budget spent" in plan.waiting["b2"] and "scavenger" in plan.waiting["b2"]
    assert plan.waiting_code["b2"] == "spent"


def test_a_spent_parent_remainder_does_not_spend_its_children():
    """lab/a's own remainder is spent by its own members; its child lab/a/x still has budget and runs in budget."""
    teams = (TeamState("lab", None, 2), TeamState("lab/a", "lab", 1, remaining_gpu_hours=-5),
             TeamState("lab/a/x", "lab/a", 1, remaining_gpu_hours=100))
    s = snap(nodes(1), teams, pending=[pend("x0", "lab/a/x"), pend("a0", "lab/a")])
    plan = policy.plan(s)
    assert not starts(plan)["x0"].scavenger
    assert starts(plan)["a0"].scavenger


def test_spent_team_never_preempts_in_budget_work():
    teams = (TeamState("lab", None, 2), TeamState("lab/a", "lab", 1), TeamState("lab/b", "lab", 1,
                                                                              remaining_gpu_hours=0))
    running = [run(f"r{i}", "lab/a", [("n0", 1)]) for i in range(8)]
    s = snap(nodes(1), teams, running, [pend("b0", "lab/b", submit=NOW - 9 * HOUR)])
    plan = policy.plan(s)
    assert not preempts(plan) and not starts(plan)
    assert "budget spent" in plan.waiting["b0"]


def test_in_budget_team_preempts_scavengers_of_a_spent_team():
    teams = (TeamState("lab", None, 2), TeamState("lab/a", "lab", 1), TeamState("lab/b", "lab", 1,
                                                                              remaining_gpu_hours=0))
    running = [run(f"s{i}", "lab/b", [("n0", 1)], contract="scavenger", scavenger=True, started=NOW - 60)
               for i in range(8)]
    s = snap(nodes(1), teams, running, [pend("a0", "lab/a", 2, submit=NOW - HOUR)])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert len(preempts(plan)) == 2


def test_a_spent_teams_work_is_preemptible_even_inside_its_protected_time():
    """DESIGN §4.2: a team whose budget is spent runs only as always-preemptible work. b's jobs started in budget
    30 minutes ago under a 1 h protected contract, then b ran out: a, owed its share, takes them back now rather
    than waiting out a protection b's budget no longer pays for."""
    running = [run(f"b{i}", "lab/b", [("n0", 1)], started=NOW - 1800) for i in range(8)]
    s = snap(nodes(1), flat_teams({"a": 1, "b": 1}, spent=("b",)), running,
             [pend("a0", "lab/a", 2, submit=NOW - HOUR)])
    plan = policy.plan(s)
    check_plan(s, plan)
    pre = preempts(plan)
    assert len(pre) == 2 and all(p.for_job == "a0" and p.grace_s == 600 for p in pre.values())


def test_in_budget_work_keeps_its_protection():
    """The same with b in budget (above its share, 8 of 4): its protected jobs stay until their protection ends."""
    running = [run(f"b{i}", "lab/b", [("n0", 1)], started=NOW - 1800) for i in range(8)]
    s = snap(nodes(1), flat_teams({"a": 1, "b": 1}), running, [pend("a0", "lab/a", 2, submit=NOW - HOUR)])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert not preempts(plan)


# ---- placement -------------------------------------------------------------------------------------------------
def test_best_fit_fills_partly_used_nodes_and_keeps_whole_nodes_whole():
    running = [run("r", "lab/a", [("n1", 5)])]
    s = snap(nodes(3), flat_teams({"a": 1}), running, [pend("one", "lab/a", 1), pend("two", "lab/a", 2)])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert starts(plan)["one"].placement == (("n1", 1),)
    assert starts(plan)["two"].placement == (("n1", 2),)


def test_gang_job_gets_whole_nodes_of_one_type():
    ns = nodes(2, gpu_type="H100", prefix="h") + nodes(2, gpu_type="B200", prefix="b")
    running = [run("r", "lab/a", [("h0", 1)])]
    s = snap(ns, flat_teams({"a": 1}), running, [pend("g", "lab/a", 16, gpus_per_node=8)])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert starts(plan)["g"].placement == (("b0", 8), ("b1", 8))


def test_a_gang_with_gpus_per_node_takes_the_fullest_nodes_that_hold_its_share():
    """A job of 2 x 4 GPUs, with n0 wholly free and n1 and n2 half used: it takes the halves, and n0 stays whole for
    a job of a whole node."""
    running = [run("r1", "lab/a", [("n1", 4)]), run("r2", "lab/a", [("n2", 4)])]
    s = snap(nodes(3), flat_teams({"a": 1}), running, [pend("g", "lab/a", 8, gpus_per_node=4)])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert starts(plan)["g"].placement == (("n1", 4), ("n2", 4))


def test_free_shape_job_larger_than_a_node_takes_whole_nodes_first():
    s = snap(nodes(3), flat_teams({"a": 1}), [run("r", "lab/a", [("n0", 6)])], [pend("g", "lab/a", 10)])
    plan = policy.plan(s)
    assert starts(plan)["g"].placement == (("n0", 2), ("n1", 8))


def test_gpu_type_is_respected_and_none_means_any():
    ns = nodes(1, gpus=2, gpu_type="H100", prefix="h") + nodes(1, gpus=2, gpu_type="B200", prefix="b")
    s = snap(ns, flat_teams({"a": 1}), pending=[pend("wantb", "lab/a", 2, gpu_type="B200", submit=0),
                                                pend("any", "lab/a", 2, submit=1),
                                                pend("wanth", "lab/a", 1, gpu_type="H100", submit=2)])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert starts(plan)["wantb"].placement == (("b0", 2),)
    assert starts(plan)["any"].placement == (("h0", 2),)
    assert "wanth" not in starts(plan)


def test_job_that_can_never_fit_says_so():
    """Nodes too small for its GPUs per node, too few nodes for them, or GPUs that are no multiple of them: each
    job is told that no set of nodes can ever hold it; a job the nodes can hold, even when busy, is not."""
    s = snap(nodes(1, gpus=4), flat_teams({"a": 1}), pending=[pend("huge", "lab/a", 16, gpus_per_node=8)])
    plan = policy.plan(s)
    assert "can ever hold" in plan.waiting["huge"]
    s = snap(nodes(2), flat_teams({"a": 1}), [run("r", "lab/a", [("n0", 8), ("n1", 8)])],
             [pend("three-nodes", "lab/a", 24, gpus_per_node=8), pend("odd", "lab/a", 12, gpus_per_node=8),
              pend("two-nodes", "lab/a", 16, gpus_per_node=8)])
    plan = policy.plan(s)
    assert plan.waiting_code["three-nodes"] == plan.waiting_code["odd"] == "never-fits"
    assert plan.waiting_code["two-nodes"] != "never-fits"


def test_blocked_gang_job_gets_a_reservation_and_small_jobs_do_not_take_it():
    """b (below share) needs 8 GPUs on one node; n0 has 6 free now. a's small jobs must not eat them."""
    running = [run("a-big", "lab/a", [("n1", 8)]), run("a2", "lab/a", [("n0", 2)])]
    s = snap(nodes(2), flat_teams({"a": 1, "b": 1}), running,
             [pend("b8", "lab/b", 8, submit=NOW - 60)] + [pend(f"a{i}", "lab/a", 1, submit=NOW - 9 * HOUR)
                                                          for i in range(5)])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert not starts(plan)
    (res,) = plan.reservations
    assert res.job_id == "b8" and res.kind == "gang" and res.placement == (("n0", 8),)
    assert "reserved nodes n0" in plan.waiting["b8"] and plan.waiting_code["b8"] == "gang-reserved"
    # next cycle: the reservation is handed back, a2 has ended: b8 starts on n0
    s2 = snap(nodes(2), flat_teams({"a": 1, "b": 1}), running[:1], s.pending, plan.reservations,
              now=NOW + 60)
    plan2 = policy.plan(s2)
    check_plan(s2, plan2)
    assert starts(plan2)["b8"].placement == (("n0", 8),)


def test_jobs_do_not_share_gpus_across_the_cycle():
    s = snap(nodes(1, gpus=2), flat_teams({"a": 1}), [run("r", "lab/a", [("n0", 2)])], [pend("p", "lab/a")])
    plan = policy.plan(s)
    assert not starts(plan)


# ---- debug sessions ----------------------------------------------------------------------------------------------
def test_debug_session_is_served_first_from_the_debug_pool():
    ns = (NodeState("pool", "H100", 2, debug_pool=True), NodeState("n0", "H100", 1))
    s = snap(ns, flat_teams({"a": 1, "b": 1}),
             pending=[pend("train", "lab/a", 1, submit=0), pend("dbg", "lab/b", 1, contract="debug",
                                                                  submit=NOW - 1)])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert starts(plan)["dbg"].placement == (("pool", 1),)
    assert starts(plan)["train"].placement == (("n0", 1),)


def test_batch_work_borrows_the_debug_pool_only_above_its_free_headroom():
    """An 8-GPU pool with a headroom of 4: batch work may borrow 4 of its GPUs, as preemptible loans; the other
    4 stay free for the next debug sessions."""
    ns = (NodeState("pool", "H100", 8, debug_pool=True),)
    s = snap(ns, flat_teams({"a": 1}), pending=[pend(f"t{i}", "lab/a", 1, submit=NOW - HOUR + i) for i in range(6)],
             debug_headroom_gpus=4)
    plan = policy.plan(s)
    check_plan(s, plan)
    st = starts(plan)
    assert sorted(st) == ["t0", "t1", "t2", "t3"]
    assert all(a.scavenger for a in st.values())  # loans: no protected time
    assert "t4" in plan.waiting


def test_a_job_that_fits_beside_the_headroom_is_placed_around_it():
    """Two 8-GPU pool nodes and eleven 1-GPU nodes, headroom 2: a 16-GPU job fits on the small nodes and 5 pool
    GPUs, but a plain packed placement takes both whole pool nodes, 16 pool GPUs, more than may be lent; it was
    then refused, cycle after cycle, on an empty cluster."""
    ns = tuple(NodeState(f"p{i}", "H100", 8, debug_pool=True) for i in range(2)) + nodes(11, 1, prefix="s")
    s = snap(ns, flat_teams({"a": 1}), pending=[pend("j", "lab/a", 16)], debug_headroom_gpus=2)
    plan = policy.plan(s)
    check_plan(s, plan)
    placement = dict(starts(plan)["j"].placement)
    assert sum(placement.values()) == 16 and sum(placement.get(f"p{i}", 0) for i in range(2)) <= 16 - 2


def test_a_job_placed_around_the_headroom_may_use_every_pool_gpu_beyond_it():
    """Headroom 3; the pool has 8 free GPUs on p0 and 2 on p1, so 7 may be lent; nine 1-GPU nodes are free. A
    16-GPU job takes the nine and exactly 7 of p0's GPUs: the headroom is kept on the least free pool node first
    (p1's 2, then one of p0's), no more."""
    ns = tuple(NodeState(f"p{i}", "H100", 8, debug_pool=True) for i in range(2)) + nodes(9, 1, prefix="s")
    s = snap(ns, flat_teams({"a": 1}), [run("a-p1", "lab/a", [("p1", 6)])], [pend("j", "lab/a", 16)],
             debug_headroom_gpus=3)
    plan = policy.plan(s)
    check_plan(s, plan)
    placement = dict(starts(plan)["j"].placement)
    assert placement.pop("p0") == 7 and placement == {f"s{i}": 1 for i in range(9)}


def test_a_job_too_large_to_run_beside_the_headroom_may_borrow_it():
    """Four 8-GPU nodes, one in the pool, headroom 2: a 32-GPU job can never run beside the headroom, so on an
    empty cluster it takes the pool's headroom too, as a loan a session may take back (before: never started). A
    30-GPU job fits beside it and leaves the headroom free."""
    ns = (NodeState("pool", "H100", 8, debug_pool=True),) + nodes(3)
    for gpus, pool_gpus in ((32, 8), (30, 6)):
        s = snap(ns, flat_teams({"a": 1}), pending=[pend("j", "lab/a", gpus)], debug_headroom_gpus=2)
        plan = policy.plan(s)
        check_plan(s, plan)
        start = starts(plan)["j"]
        assert dict(start.placement).get("pool") == pool_gpus and start.scavenger  # a loan either way


def test_a_headroom_larger_than_the_pool_keeps_the_whole_pool_and_no_more():
    """Three nodes and one 8-GPU pool node; lab/a's 16-GPU gang (8 per node) finds one free node and lab/b's 4-GPU
    job past protection on another. With a headroom of 2, 8 or 100 GPUs the gang claims that node, leaving the pool
    alone: a headroom above the pool's 8 GPUs once made every job seem too large to ever run beside it, and the
    gang took the whole pool (and the replay served the queue job by job, 30 times slower)."""
    ns = nodes(3) + nodes(1, prefix="p", debug_pool=True)
    running = [run("b0", "lab/b", [("n0", 8)]), run("b1", "lab/b", [("n1", 4)])]
    for headroom in (2, 8, 100):
        s = snap(ns, flat_teams({"a": 1, "b": 1}), running, [pend("g", "lab/a", 16, gpus_per_node=8)],
                 debug_headroom_gpus=headroom)
        plan = policy.plan(s)
        check_plan(s, plan)
        assert "g" not in starts(plan) and list(preempts(plan)) == ["b1"]
        assert [dict(r.placement) for r in plan.reservations] == [{"n1": 8, "n2": 8}]


def test_a_job_too_large_to_run_beside_the_headroom_starts_in_its_turn_before_smaller_jobs_behind_it():
    """Two 8-GPU nodes, one in the pool, headroom 2, a team whose budget is spent (scavenger work, which claims
    nothing): its first job, 16 GPUs, can only ever run on the headroom too; it starts on the empty cluster before
    the 1-GPU job queued behind it (the walk's shortcut past jobs larger than the GPUs batch work may take passed
    over it, and started the 1-GPU job instead)."""
    ns = (NodeState("pool", "H100", 8, debug_pool=True),) + nodes(1)
    spent = (TeamState("lab", None, 10, remaining_gpu_hours=0), TeamState("lab/a", "lab", 10, remaining_gpu_hours=0))
    s = snap(ns, spent, pending=[pend("big", "lab/a", 16, submit=NOW - 20), pend("small", "lab/a", 1, submit=NOW - 10)],
             debug_headroom_gpus=2)
    plan = policy.plan(s)
    check_plan(s, plan)
    assert set(starts(plan)) == {"big"} and starts(plan)["big"].scavenger


def test_the_pool_headroom_is_the_configured_gpus_and_a_larger_session_takes_back_loans():
    """Headroom 2 on a 16-GPU pool: with a 4-GPU or a 1-GPU session running, batch work borrows every free GPU but
    2 (a headroom that grew to the largest running session kept whole nodes idle on the synthetic labs, docs/policy.md
    §8). A 4-GPU session that then arrives starts on the 2 free GPUs and 2 loans taken back, at once."""
    ns = (NodeState("pool", "H100", 16, debug_pool=True),)
    pending = [pend(f"t{i:02}", "lab/a", 1, submit=NOW - HOUR + i) for i in range(16)]
    for session_gpus, loans in ((4, 10), (1, 13)):
        session = run("dbg", "lab/a", [("pool", session_gpus)], contract="debug", started=NOW - 600)
        s = snap(ns, flat_teams({"a": 1}), [session], pending, debug_headroom_gpus=2)
        plan = policy.plan(s)
        check_plan(s, plan)
        assert sorted(starts(plan)) == [f"t{i:02}" for i in range(loans)]
        assert all(a.scavenger for a in starts(plan).values())  # loans: no protected time
    session = run("dbg", "lab/a", [("pool", 4)], contract="debug", started=NOW - 600)
    lent = [run(f"t{i:02}", "lab/a", [("pool", 1)], started=NOW - 60, scavenger=True) for i in range(10)]
    s = snap(ns, flat_teams({"a": 1}), [session, *lent], [pend("dbg2", "lab/a", 4, contract="debug", submit=NOW - 5)],
             now=NOW + 1, debug_headroom_gpus=2)
    plan = policy.plan(s)
    check_plan(s, plan)
    assert len(preempts(plan)) == 2 and all(p.for_job == "dbg2" for p in preempts(plan).values())


def _pool_loan(session_team: str = "lab/a", spent: tuple[str, ...] = ()):
    """One pool GPU lent to b's job (started as scavenger work, under the standard contract), one GPU of a's
    work, no headroom, and a debug session of ``session_team``."""
    ns = (NodeState("pool", "H100", 1, debug_pool=True), NodeState("n0", "H100", 1))
    running = [run("loan", "lab/b", [("pool", 1)], started=NOW - 60, scavenger=True),
               run("a0", "lab/a", [("n0", 1)], started=NOW - 60)]
    return snap(ns, flat_teams({"a": 1, "b": 1, "c": 1}, spent=spent), running,
                [pend("dbg", session_team, 1, contract="debug", submit=NOW - 5)], debug_headroom_gpus=0)


def test_debug_session_takes_back_a_pool_loan_even_from_a_team_within_its_share():
    """b's job borrowed a pool GPU; b is within its share, so batch work could not take it, but the debug pool
    is lent on the condition that debug sessions get it back."""
    s = _pool_loan()
    plan = policy.plan(s)
    check_plan(s, plan)
    pre = preempts(plan)
    assert set(pre) == {"loan"} and pre["loan"].for_job == "dbg" and pre["loan"].reason == "debug"


def test_a_session_takes_back_a_loan_with_the_scavenger_contracts_notice_not_the_borrowers_own():
    """The loan runs under the standard contract (10 minutes of grace) but started as scavenger work, on the
    scavenger contract's terms: the session waits for that contract's 30 s, not for 10 minutes. Work that started
    within its team's share keeps its own contract's grace."""
    s = _pool_loan()
    plan = policy.plan(s)
    assert preempts(plan)["loan"].grace_s == SCAVENGER.grace_s == 30
    # without a scavenger contract in the configuration, the borrower keeps its own contract's grace
    plan = policy.plan(replace(s, config=replace(s.config, scavenger_contract="none")))
    assert preempts(plan)["loan"].grace_s == STANDARD.grace_s == 600
    # and a session that takes the team's own in-share work past protection gives it its contract's grace
    s = snap((NodeState("n0", "H100", 1),), flat_teams({"a": 1, "b": 1}),
             [run("own", "lab/a", [("n0", 1)], started=NOW - 2 * HOUR)],
             [pend("dbg", "lab/a", 1, contract="debug", submit=NOW - 5)])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert preempts(plan)["own"].grace_s == 600


def test_a_spent_teams_session_takes_back_a_pool_loan_too():
    """The debug pool exists for sessions, whoever's they are: c has spent its budget, yet its session takes
    back b's loan of a pool GPU (and starts as scavenger work, at the scavenger price)."""
    s = _pool_loan("lab/c", spent=("c",))
    plan = policy.plan(s)
    check_plan(s, plan)
    pre = preempts(plan)
    assert set(pre) == {"loan"} and pre["loan"].for_job == "dbg"


def test_debug_session_stops_one_job_rather_than_two_when_one_frees_enough():
    """Two fresh 1-GPU loans would lose the least work, but stopping the one 2-GPU loan stops fewer jobs."""
    ns = (NodeState("pool", "H100", 4, debug_pool=True),)
    running = [run("big", "lab/a", [("pool", 2)], started=NOW - 3 * HOUR, scavenger=True),
               run("s0", "lab/a", [("pool", 1)], started=NOW - 60, scavenger=True),
               run("s1", "lab/a", [("pool", 1)], started=NOW - 60, scavenger=True)]
    s = snap(ns, flat_teams({"a": 1, "b": 1}), running,
             [pend("dbg", "lab/b", 2, contract="debug", submit=NOW - 5)], debug_headroom_gpus=0)
    plan = policy.plan(s)
    check_plan(s, plan)
    assert set(preempts(plan)) == {"big"}


def test_a_session_takes_borrowed_work_of_a_team_above_its_share_before_a_loan_its_team_needs():
    """a's job on the pool GPU is a loan, but a holds no more than its share: taken back, a would be owed a GPU and
    claim it from another team, a second job stopped. b borrows two GPUs beyond its share of one. The session
    takes one of b's jobs, though a's loan, started a minute ago, would lose less work (the choice before)."""
    ns = (NodeState("pool", "H100", 1, debug_pool=True), NodeState("n0", "H100", 2))
    running = [run("loan", "lab/a", [("pool", 1)], started=NOW - 60, scavenger=True),
               run("b0", "lab/b", [("n0", 1)], started=NOW - 3 * HOUR, scavenger=True),
               run("b1", "lab/b", [("n0", 1)], started=NOW - 3 * HOUR, scavenger=True)]
    pending = [pend("dbg", "lab/c", 1, contract="debug", submit=NOW - 5), pend("a1", "lab/a", 1),
               pend("b2", "lab/b", 1)]
    s = snap(ns, flat_teams({"a": 1, "b": 1, "c": 1}), running, pending, debug_headroom_gpus=0)
    plan = policy.plan(s)
    check_plan(s, plan)
    pre = preempts(plan)
    assert len(pre) == 1 and set(pre) <= {"b0", "b1"} and pre.popitem()[1].for_job == "dbg"


def test_a_spent_teams_session_keeps_the_hold_it_preempted_for():
    """Regression: the hold of a spent team's session was dropped, so the GPUs its victim freed went to batch
    work and the session preempted again every cycle (thousands of take-backs in a replay)."""
    ns = (NodeState("pool", "H100", 2, debug_pool=True),)
    teams = flat_teams({"a": 1, "c": 1}, spent=("c",))
    loans = [run("loan0", "lab/a", [("pool", 1)], started=NOW - 600, scavenger=True),
             run("loan1", "lab/a", [("pool", 1)], started=NOW - 600, scavenger=True)]
    pending = [pend("dbg", "lab/c", 2, contract="debug", submit=NOW - 5), pend("batch", "lab/a", 1)]
    s1 = snap(ns, teams, loans, pending, debug_headroom_gpus=0)
    plan1 = policy.plan(s1)
    check_plan(s1, plan1)
    assert set(preempts(plan1)) == {"loan0", "loan1"}
    hold = [r for r in plan1.reservations if r.job_id == "dbg"]
    # a minute later: loan0 has left, loan1 is still saving its checkpoint
    s2 = snap(ns, teams, [run("loan1", "lab/a", [("pool", 1)], started=NOW - 600, scavenger=True,
                              preempting=True)],
              pending, reservations=hold, now=NOW + 60, debug_headroom_gpus=0)
    plan2 = policy.plan(s2)
    check_plan(s2, plan2)
    assert not preempts(plan2) and not starts(plan2)  # the freed GPU stays held for the session
    s3 = snap(ns, teams, [], pending, reservations=hold, now=NOW + 70, debug_headroom_gpus=0)
    plan3 = policy.plan(s3)
    check_plan(s3, plan3)
    assert starts(plan3)["dbg"].placement == (("pool", 2),) and starts(plan3)["dbg"].scavenger


def test_a_spent_team_does_not_take_in_budget_work_off_ordinary_nodes_for_a_session():
    """Outside the pool, a spent team's session still takes only out-of-budget work: b's borrowed job stays."""
    ns = (NodeState("n0", "H100", 1),)
    running = [run("borrowed", "lab/b", [("n0", 1)], started=NOW - 60, scavenger=True)]
    s = snap(ns, flat_teams({"a": 1, "b": 1, "c": 1}, spent=("c",)), running,
             [pend("dbg", "lab/c", 1, contract="debug", submit=NOW - 5)])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert not preempts(plan) and "budget spent" in plan.waiting["dbg"] and plan.waiting_code["dbg"] == "debug-spent"


def test_debug_session_preempts_scavenger_work_at_once():
    running = [run(f"r{i}", "lab/a", [("n0", 1)], started=NOW - 60) for i in range(7)]
    running.append(run("scav", "lab/c", [("n0", 1)], contract="scavenger", scavenger=True, started=NOW - 30))
    s = snap(nodes(1), flat_teams({"a": 1, "b": 1, "c": 1}, spent=("c",)), running,
             [pend("dbg", "lab/b", 1, contract="debug", submit=NOW - 5)])
    plan = policy.plan(s)
    check_plan(s, plan)
    pre = preempts(plan)
    assert set(pre) == {"scav"} and pre["scav"].reason == "debug" and pre["scav"].for_job == "dbg"


def test_a_session_runs_on_one_machine_never_split_over_two():
    """Two nodes with one free GPU each: a 2-GPU session does not start on both (a shell or notebook runs on one
    machine); it takes back the scavenger work on one node instead. A 2-GPU batch job may still span them."""
    running = [run(f"a{i}", "lab/a", [("n0", 1)], started=NOW - 60) for i in range(7)]
    running += [run(f"b{i}", "lab/b", [("n1", 1)], started=NOW - 60) for i in range(6)]
    running.append(run("scav", "lab/c", [("n1", 1)], contract="scavenger", scavenger=True, started=NOW - 30))
    teams = flat_teams({"a": 1, "b": 1, "c": 1}, spent=("c",))
    s = snap(nodes(2), teams, running, [pend("dbg", "lab/b", 2, contract="debug", submit=NOW - 5)])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert "dbg" not in starts(plan)
    assert set(preempts(plan)) == {"scav"} and preempts(plan)["scav"].for_job == "dbg"
    s = snap(nodes(2), teams, running, [pend("job", "lab/b", 2, submit=NOW - 5)])
    assert starts(policy.plan(s))["job"].placement == (("n0", 1), ("n1", 1))


def test_debug_session_takes_over_share_work_past_protection_from_another_team():
    """a runs 6 of 8 GPUs against a share of 4, past protection; b's session takes one of a's jobs. (Regression:
    the check also compared the whole lab with its entitlement, which any victim lowers, so a session could never
    take in-budget work of another team.)"""
    running = [run(f"a{i}", "lab/a", [("n0", 1)], started=NOW - 3 * HOUR) for i in range(6)]
    running += [run(f"b{i}", "lab/b", [("n0", 1)], started=NOW - 60) for i in range(2)]
    s = snap(nodes(1), flat_teams({"a": 1, "b": 1}), running,
             [pend("dbg", "lab/b", 1, contract="debug", submit=NOW - 5), pend("b-more", "lab/b", 4)])
    plan = policy.plan(s)
    check_plan(s, plan)
    pre = preempts(plan)
    assert len(pre) == 1 and next(iter(pre)).startswith("a") and next(iter(pre.values())).reason == "debug"


def test_debug_session_takes_its_own_teams_work_past_protection_when_no_one_else_is_above_share():
    """a and b each run exactly their share; a's session may not push b below its share, but it comes first in
    a's own queue, so a's own job past its protected time yields (the GPUs stay a's)."""
    running = [run(f"a{i}", "lab/a", [("n0", 1)], started=NOW - 3 * HOUR) for i in range(4)]
    running += [run(f"b{i}", "lab/b", [("n0", 1)], started=NOW - 3 * HOUR) for i in range(4)]
    s = snap(nodes(1), flat_teams({"a": 1, "b": 1}), running,
             [pend("dbg", "lab/a", 1, contract="debug", submit=NOW - 5)])
    plan = policy.plan(s)
    check_plan(s, plan)
    pre = preempts(plan)
    assert len(pre) == 1 and next(iter(pre)).startswith("a")
    assert next(iter(pre.values())).for_job == "dbg"


def test_debug_session_never_takes_its_own_teams_protected_work():
    running = [run(f"a{i}", "lab/a", [("n0", 1)], started=NOW - 60) for i in range(4)]
    running += [run(f"b{i}", "lab/b", [("n0", 1)], started=NOW - 3 * HOUR) for i in range(4)]
    s = snap(nodes(1), flat_teams({"a": 1, "b": 1}), running,
             [pend("dbg", "lab/a", 1, contract="debug", submit=NOW - 5)])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert not preempts(plan)
    reason = plan.waiting["dbg"]
    assert "session" in reason and "protected time" in reason and "leaves its protected time in 59 min" in reason
    assert plan.waiting_code["dbg"] == "debug-protected"


def test_a_session_that_finds_everything_protected_reserves_the_node_that_frees_first():
    """One node, eight 1-GPU jobs of b (above its share, all protected for 50 more minutes), a 4-GPU session of a
    (owed 2 GPUs: a session is served whatever its team's standing): no plan, so the node is reserved for the
    session. A minute later one of b's jobs has ended: its GPU is kept for the session, not given to b's next job
    (which would be protected in turn: the session waited for hours), and the reservation is the same one."""
    running = [run(f"b{i}", "lab/b", [("n0", 1)], started=NOW - 600) for i in range(8)]
    teams = flat_teams({"a": 1, "b": 3})
    session = pend("dbg", "lab/a", 4, contract="debug", submit=NOW - 5)
    s = snap(nodes(1), teams, running, [session])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert not plan.actions
    assert [(r.job_id, r.kind, r.placement) for r in plan.reservations] == [("dbg", "gang", (("n0", 4),))]
    assert plan.waiting_code["dbg"] == "gang-reserved" and "one machine" in plan.waiting["dbg"]

    later = snap(nodes(1), teams, running[1:], [session, pend("b-next", "lab/b", 1, submit=NOW - HOUR)],
                 reservations=plan.reservations, now=NOW + 60)
    plan = policy.plan(later)
    check_plan(later, plan)
    assert not starts(plan) and [(r.job_id, r.since_s) for r in plan.reservations] == [("dbg", NOW)]
    assert "1 of 4 GPUs free so far" in plan.waiting["dbg"]


def test_own_team_work_is_not_a_victim_for_the_teams_batch_job():
    """a is owed 7 GPUs and waits for a 4-GPU job; n0 has 3 free GPUs and a's own old job, b's work is protected.
    The share arithmetic alone would allow taking a's job (a gains 4, loses 1): only the own-team rule forbids it,
    since the GPUs would stay a's. A debug session of a's may take it."""
    running = [run("a-old", "lab/a", [("n0", 1)], started=NOW - 3 * HOUR)]
    running += [run(f"b{i}", "lab/b", [("n0", 1)], started=NOW - 60) for i in range(4)]
    running += [run(f"c{i}", "lab/b", [("n1", 1)], started=NOW - 60) for i in range(8)]
    s = snap(nodes(2), flat_teams({"a": 1, "b": 1}), running, [pend("job", "lab/a", 4, submit=NOW - 2 * HOUR)])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert not preempts(plan)
    dbg = snap(nodes(2), flat_teams({"a": 1, "b": 1}), running,
               [pend("dbg", "lab/a", 4, contract="debug", submit=NOW - 5)])
    assert set(preempts(policy.plan(dbg))) == {"a-old"}


def test_too_large_debug_session_is_told_why():
    """Sessions are limited to ``debug_max_gpus`` (8): one of 9 is told to go to the batch queue, one of 8 starts."""
    s = snap(nodes(2), flat_teams({"a": 1}), pending=[pend("dbg", "lab/a", 9, contract="debug"),
                                                      pend("dbg8", "lab/a", 8, contract="debug")])
    plan = policy.plan(s)
    assert "limited to 8" in plan.waiting["dbg"] and plan.waiting_code["dbg"] == "debug-too-large"
    assert "dbg8" in starts(plan)


# ---- squatting and releases ------------------------------------------------------------------------------------
def test_idle_batch_job_is_flagged_and_idle_debug_session_released():
    running = [run("squat", "lab/a", [("n0", 1)], idle_since_s=NOW - 2 * HOUR),
               run("squat-now", "lab/a", [("n0", 1)], idle_since_s=NOW - 1800),  # idle just the 30 minutes
               run("busy", "lab/a", [("n0", 1)], idle_since_s=NOW - 60),
               run("dbg-idle", "lab/a", [("n0", 1)], contract="debug", started=NOW - HOUR,
                   idle_since_s=NOW - 1000),
               run("dbg-idle-now", "lab/a", [("n0", 1)], contract="debug", started=NOW - HOUR,
                   idle_since_s=NOW - 900),  # idle just the 15 minutes
               run("dbg-pause", "lab/a", [("n1", 1)], contract="debug", started=NOW - HOUR,
                   idle_since_s=NOW - 60),  # a pause, not an abandoned session
               run("dbg-over", "lab/a", [("n1", 1)], contract="debug", started=NOW - 4 * HOUR),  # its 4 hours
               # booked for 6 hours: the contract's 4 hours still bound it
               run("dbg-long", "lab/a", [("n1", 1)], contract="debug", started=NOW - 4 * HOUR, time_limit_s=6 * HOUR),
               run("dbg-old", "lab/a", [("n0", 1)], contract="debug", started=NOW - 5 * HOUR),
               run("dbg-ok", "lab/a", [("n0", 1)], contract="debug", started=NOW - HOUR),
               # booked for half an hour (its own time limit, below the contract's 4 hours)
               run("dbg-booked", "lab/a", [("n0", 1)], contract="debug", started=NOW - HOUR, time_limit_s=1800)]
    s = snap(nodes(2), flat_teams({"a": 1}), running)
    plan = policy.plan(s)
    check_plan(s, plan)
    assert set(flags(plan)) == {"squat", "squat-now"} and flags(plan)["squat"].idle_s == 2 * HOUR
    assert {k: v.reason for k, v in releases(plan).items()} == {
        "dbg-idle": "idle", "dbg-idle-now": "idle", "dbg-old": "expired", "dbg-booked": "expired",
        "dbg-over": "expired", "dbg-long": "expired"}


def test_a_released_session_no_longer_counts_against_its_teams_share():
    """Released as idle, the session's 8 GPUs are not its team's any more: the team's waiting job is told its team
    runs 1 GPU of its share, and no job is preempted for it while the released node frees up."""
    running = [run("dbg-idle", "lab/a", [("n0", 8)], contract="debug", started=NOW - HOUR,
                   idle_since_s=NOW - HOUR),
               run("a1", "lab/a", [("n2", 1)]), run("b7", "lab/b", [("n2", 7)]), run("b8", "lab/b", [("n1", 8)])]
    s = snap(nodes(3), flat_teams({"a": 1, "b": 1, "c": 1}), running, [pend("a7", "lab/a", 7)])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert releases(plan)["dbg-idle"].reason == "idle" and not preempts(plan)
    assert "runs 1 of 8.0 entitled GPUs" in plan.waiting["a7"]


# ---- the cycle's bookkeeping: reservations handed back, the shortfall ------------------------------------------
def _handed_back(expires_s: float, spent: tuple[str, ...] = ()):
    """3 x 8 GPUs: lab/a (a quarter of the budget) runs 8, above its share; lab/b runs 8; n0 is free, held for
    lab/a's 8-GPU job by a hold handed back from the last cycle; lab/b waits with an 8-GPU job of its own. An
    older hold on n0 for a job no longer pending (cancelled meanwhile) is dropped."""
    running = [run("a1", "lab/a", [("n2", 8)], started=NOW - 300), run("b1", "lab/b", [("n1", 8)], started=NOW - 300)]
    holds = (Reservation("a8", (("n0", 8),), expires_s, "hold", NOW - 900),
             Reservation("gone", (("n0", 8),), NOW + 600, "hold", NOW - 1000))
    s = snap(nodes(3), flat_teams({"a": 1, "b": 3}, spent=spent), running,
             [pend("a8", "lab/a", 8, submit=NOW - 2 * HOUR), pend("b8", "lab/b", 8, submit=NOW - 3 * HOUR)],
             reservations=holds)
    plan = policy.plan(s)
    check_plan(s, plan)
    return plan


def test_a_hold_keeps_its_gpus_until_it_expires_and_not_from_then():
    assert starts(_handed_back(NOW + 1))["a8"].placement == (("n0", 8),)
    plan = _handed_back(NOW)  # (expired this very moment: n0 goes in the Fair-Tree order, lab/b first)
    assert starts(plan)["b8"].placement == (("n0", 8),) and "a8" not in starts(plan)


def test_a_team_whose_budget_is_spent_keeps_no_hold_for_its_batch_job():
    plan = _handed_back(NOW + 600, spent=("a",))
    assert starts(plan)["b8"].placement == (("n0", 8),) and plan.waiting_code["a8"] == "spent"


def test_a_hold_counts_as_its_teams_allocation_so_the_team_does_not_preempt_again_for_its_next_job():
    """lab/a (entitled to 12) runs 4 and holds 8 on n0 while b1 checkpoints: it is at its share, so its next 8-GPU
    job takes nothing from lab/b's b2, past its protection."""
    running = [run("a4", "lab/a", [("n2", 4)]), run("b0", "lab/b", [("n2", 4)]),
               run("b1", "lab/b", [("n0", 8)], preempting=True, preempt_deadline_s=NOW + 300),
               run("b2", "lab/b", [("n1", 8)])]
    hold = Reservation("a8", (("n0", 8),), NOW + 900, "hold", NOW - 300)
    s = snap(nodes(3), flat_teams({"a": 1, "b": 1}), running, [pend("a8", "lab/a", 8), pend("a8b", "lab/a", 8)],
             reservations=(hold,))
    plan = policy.plan(s)
    check_plan(s, plan)
    assert not preempts(plan) and plan.waiting_code == {"a8": "held", "a8b": "at-share"}


def test_a_job_that_starts_on_its_hold_counts_once_and_its_teams_next_job_starts_protected():
    """lab/a (entitled to 12) starts a8 on its hold, now free, and a4 beside it: 12 GPUs, within its share, so a4
    is its own work, not borrowed."""
    running = [run("b1", "lab/b", [("n1", 8)]), run("b2", "lab/b", [("n2", 4)])]
    hold = Reservation("a8", (("n0", 8),), NOW + 900, "hold", NOW - 300)
    s = snap(nodes(3), flat_teams({"a": 2, "b": 1}), running, [pend("a8", "lab/a", 8), pend("a4", "lab/a", 4)],
             reservations=(hold,))
    plan = policy.plan(s)
    check_plan(s, plan)
    assert starts(plan)["a8"].placement == (("n0", 8),) and not starts(plan)["a8"].scavenger
    assert starts(plan)["a4"].placement == (("n2", 4),) and not starts(plan)["a4"].scavenger


def test_a_gang_reservation_handed_back_is_renewed_while_its_team_is_owed_the_job_and_dropped_once_not():
    gang = Reservation("a8", (("n0", 8),), NOW + 60, "gang", NOW - 3000)
    running = [run("b1", "lab/b", [("n0", 8)], started=NOW - 300), run("b2", "lab/b", [("n1", 8)], started=NOW - 300)]
    s = snap(nodes(2), flat_teams({"a": 1, "b": 1}), running, [pend("a8", "lab/a", 8)], reservations=(gang,))
    plan = policy.plan(s)
    check_plan(s, plan)
    assert plan.reservations == (Reservation("a8", (("n0", 8),), NOW + 3600, "gang", NOW - 3000),)
    # lab/a now runs its share elsewhere: the reservation goes
    running = [run("a1", "lab/a", [("n1", 8)], started=NOW - 300), run("b1", "lab/b", [("n0", 8)], started=NOW - 300)]
    s = snap(nodes(2), flat_teams({"a": 1, "b": 1}), running, [pend("a8", "lab/a", 8)], reservations=(gang,))
    plan = policy.plan(s)
    check_plan(s, plan)
    assert not plan.reservations and plan.waiting_code["a8"] == "at-share"


def test_a_hold_handed_back_that_does_not_hold_its_jobs_gpus_is_dropped():
    """(state the caller kept wrong, say a database edited by hand): the job is placed afresh, whole."""
    hold = Reservation("a8", (("n0", 4),), NOW + 900, "hold", NOW - 300)
    s = snap(nodes(2), flat_teams({"a": 1, "b": 1}), [run("b1", "lab/b", [("n1", 8)], started=NOW - 300)],
             [pend("a8", "lab/a", 8)], reservations=(hold,))
    plan = policy.plan(s)
    check_plan(s, plan)
    assert starts(plan)["a8"].placement == (("n0", 8),)


def test_of_two_reservations_handed_back_over_the_same_gpus_the_older_wins_and_the_others_stand():
    """a8's hold on n0 is older than c8's: a8 starts there, c8's hold goes, and b8's gang reservation on n1, handed
    back after both, is kept with its age."""
    running = [run("c1", "lab/c", [("n1", 8)], started=NOW - 300), run("c2", "lab/c", [("n2", 8)], started=NOW - 300)]
    handed = (Reservation("a8", (("n0", 8),), NOW + 600, "hold", NOW - 900),
              Reservation("c8", (("n0", 8),), NOW + 600, "hold", NOW - 800),
              Reservation("b8", (("n1", 8),), NOW + 600, "gang", NOW - 700))
    s = snap(nodes(3), flat_teams({"a": 1, "b": 1, "c": 1}), running,
             [pend("a8", "lab/a", 8), pend("b8", "lab/b", 8), pend("c8", "lab/c", 8)], reservations=handed)
    plan = policy.plan(s)
    check_plan(s, plan)
    assert starts(plan)["a8"].placement == (("n0", 8),) and "c8" not in starts(plan)
    assert plan.reservations == (Reservation("b8", (("n1", 8),), NOW + 3600, "gang", NOW - 700),)


def test_the_shortfall_adds_what_a_team_was_short_since_the_last_cycle_and_records_what_it_is_short_now():
    """lab/a was 2 GPUs short 10 minutes ago with 1,000 GPU-seconds gone: 2,200 now, 1 GPU short (7 of its 8)."""
    running = [run("a7", "lab/a", [("n0", 7)]), run("b9", "lab/b", [("n1", 8), ("n0", 1)])]
    s = snap(nodes(2), flat_teams({"a": 1, "b": 1}), running, [pend("a8", "lab/a", 8), pend("b8", "lab/b", 8)])
    plan = policy.plan(replace(s, shortfall=Shortfall(NOW - 600, {"lab/a": (1000.0, 2.0)})))
    assert plan.shortfall == Shortfall(NOW, {"lab/a": (2200.0, 1.0)})


# ---- misc -----------------------------------------------------------------------------------------------------
def test_decay_halves_per_half_life():
    assert decay(100.0, 3600, 3600) == 50.0
    assert decay(100.0, 0, 3600) == 100.0
    assert abs(decay(100.0, 7200, 3600) - 25.0) < 1e-9
    # a half-life of 0 (or none) means usage never fades; time running backwards (a clock step) ages nothing
    assert decay(100.0, 3600, 0) == decay(100.0, 3600, math.inf) == decay(100.0, -60, 3600) == 100.0
    # a steady GPU accumulates to half_life / ln 2 GPU-seconds of decayed usage: the horizon of standing
    assert memory_s(3600) == pytest.approx(3600 / math.log(2)) and memory_s(0) == memory_s(math.inf) == 3600.0
    # seconds are seconds, however short: one second of a one-second half-life halves it, half a second less
    assert decay(100.0, 1.0, 1.0) == pytest.approx(50.0) and decay(100.0, 2.0, 1.0) == pytest.approx(25.0)
    assert decay(100.0, 0.5, 1.0) == pytest.approx(100 * 0.5 ** 0.5)
    assert memory_s(1.0) == pytest.approx(1 / math.log(2))


def test_policy_package_imports_no_django():
    code = ("import sys, scheduling.policy; bad = [m for m in sys.modules if m.startswith('django')]; "
            "assert not bad, bad")
    import os
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)


def test_a_gang_reservation_does_not_count_on_work_it_could_never_take():
    """b (below share, owed 8 or more) needs a whole node. n0 holds a's 2-GPU job past its protection, but a is
    exactly at its share, so that job can never be taken for b: reserving n0 would only keep its 6 free GPUs idle
    until the job ends by itself. No reservation; the free GPUs stay usable. Were a above its share, n0 would be
    reserved."""
    def cycle(a_grant):
        running = [run("a-big", "lab/a", [("n1", 6)]), run("a2", "lab/a", [("n0", 2)])]
        s = snap(nodes(2), flat_teams({"a": a_grant, "b": 1}), running,
                 [pend("b8", "lab/b", 8, submit=NOW - 60, gpus_per_node=8),
                  pend("b8-next", "lab/b", 8, submit=NOW - 50, gpus_per_node=8),
                  pend("a1", "lab/a", 1, submit=NOW - 30)])
        plan = policy.plan(s)
        check_plan(s, plan)
        return plan

    plan = cycle(1)
    assert not [r for r in plan.reservations if r.kind == "gang"]
    assert "a1" in starts(plan)
    plan = cycle(0.5)  # a entitled to 5.3 GPUs: a2 may be taken once the reservation needs it
    assert [(r.job_id, r.placement) for r in plan.reservations if r.kind == "gang"] == [("b8", (("n0", 8),))]


def test_a_gang_reservation_counts_on_out_of_budget_work():
    """c's budget is spent: its job on n0 has no time limit but may be taken whenever a plan needs its GPUs, so b's
    gang (too young to preempt yet) reserves n0 and its 6 free GPUs wait for it, not for a's borrowed work."""
    running = [run("a-big", "lab/a", [("n1", 8)], started=NOW - 600), run("c2", "lab/c", [("n0", 2)])]
    s = snap(nodes(2), flat_teams({"a": 1, "b": 1, "c": 1}, spent=("c",)), running,
             [pend("b8", "lab/b", 8, submit=NOW - 60, gpus_per_node=8), pend("a1", "lab/a", 1, submit=NOW - 30)])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert [(r.job_id, r.placement) for r in plan.reservations if r.kind == "gang"] == [("b8", (("n0", 8),))]
    assert "a1" not in starts(plan)


def test_a_gang_reservation_counts_on_the_time_limits_of_the_jobs_on_its_nodes():
    """b (owed half the cluster) needs a whole node; a's jobs are inside their protected time (the long contract):
    n1 is full, n0 has 6 free GPUs and a2 on its last 2. With no time limit a2 may run for days, and holding n0's
    free GPUs for b8 would keep them idle; with a limit that ends a2 within the hour, n0 is reserved for b8."""
    def cycle(a2_limit):
        running = [run("a-big", "lab/a", [("n1", 8)], started=NOW - 600, contract="long"),
                   run("a2", "lab/a", [("n0", 2)], started=NOW - 600, contract="long", time_limit_s=a2_limit)]
        s = snap(nodes(2), flat_teams({"a": 1, "b": 1}), running,
                 [pend("b8", "lab/b", 8, submit=NOW - 60, gpus_per_node=8), pend("a1", "lab/a", 1)])
        plan = policy.plan(s)
        check_plan(s, plan)
        return plan

    plan = cycle(None)
    assert not plan.reservations and "a1" in starts(plan)
    plan = cycle(3600)
    (res,) = plan.reservations
    assert (res.job_id, res.kind, res.placement) == ("b8", "gang", (("n0", 8),))
    assert not starts(plan)


def test_a_gang_of_free_shape_reserves_the_node_that_holds_its_largest_part_whole():
    """b (owed half the cluster) asks for 12 GPUs in any shape: 8 on one node and 4 on another. n0 stands free, a's
    protected jobs fill n2 with no end in sight and five of n1's GPUs, each ending ten minutes after the last. Its
    largest part is placed first, so the gang waits for one of n1's jobs (10 min), not five of them (50 min)."""
    running = [run("a-big", "lab/a", [("n2", 8)], started=NOW - 600, contract="long")]
    running += [run(f"a{i}", "lab/a", [("n1", 1)], started=NOW - 600, contract="long", time_limit_s=600 * (i + 2))
                for i in range(5)]
    s = snap(nodes(3), flat_teams({"a": 1, "b": 1}), running, [pend("b12", "lab/b", 12, submit=NOW - 60)])
    plan = policy.plan(s)
    check_plan(s, plan)
    (res,) = plan.reservations
    assert (res.job_id, res.kind, dict(res.placement)) == ("b12", "gang", {"n0": 8, "n1": 4})


def test_a_reserved_gang_takes_a_node_freed_beside_its_own_only_when_no_job_before_it_does():
    """b's gang reserved n0 (free, claimed) and n1 (3 of 8 free; a's job there ends in 20 minutes); n2 has freed
    whole since. The walk serves c's 3-GPU job first (it fits the free GPUs, the gang does not), on n2, and the
    gang keeps waiting for n1 (starting it first, on n0 and n2, lost impact: docs/policy-history.md §7). With c's
    budget spent, c's job comes after every in-budget job: the gang's plan counts its claimed GPUs as free, it
    starts on n0 and n2, and n1's three claimed GPUs go back, to c's job as scavenger work."""
    res = Reservation("b16", (("n0", 8), ("n1", 8)), NOW + HOUR, "gang", NOW - 600)
    running = [run("a5", "lab/a", [("n1", 5)], started=NOW - 600, contract="long", time_limit_s=1800)]
    gang = pend("b16", "lab/b", 16, gpus_per_node=8, submit=NOW - HOUR)
    s = snap(nodes(3), flat_teams({"a": 1, "b": 1, "c": 1}), running, [gang, pend("c3", "lab/c", 3)], (res,))
    plan = policy.plan(s)
    check_plan(s, plan)
    assert starts(plan) == {"c3": Start("c3", (("n2", 3),), scavenger=False)}
    assert [(r.job_id, r.placement) for r in plan.reservations] == [("b16", res.placement)]
    s = snap(s.nodes, flat_teams({"a": 1, "b": 1, "c": 1}, spent=("c",)), running, s.pending, (res,))
    plan = policy.plan(s)
    check_plan(s, plan)
    assert starts(plan) == {"b16": Start("b16", (("n0", 8), ("n2", 8)), scavenger=False),
                            "c3": Start("c3", (("n1", 3),), scavenger=True)}
    assert not plan.reservations


def test_job_that_can_never_fit_says_so_behind_jobs_that_wait():
    """The walk passes over a full team's jobs that fit nowhere now; the one that can never fit still says so."""
    running = [run("a-run", "lab/a", [("n0", 4)])]
    s = snap(nodes(1, gpus=4), flat_teams({"a": 1}), running,
             [pend("next", "lab/a", 2, submit=0), pend("huge", "lab/a", 16, gpus_per_node=8, submit=1)])
    plan = policy.plan(s)
    assert "can ever hold" in plan.waiting["huge"] and plan.waiting_code["huge"] == "never-fits"
    assert "can ever hold" not in plan.waiting["next"]


def test_a_job_larger_than_its_team_may_claim_is_not_promised_a_preemption():
    """Team a is owed 6 GPUs and runs two 1-GPU jobs: its 16-GPU job may claim nothing (less than half of it is
    owed), so its reason says no job is preempted for it; its 1-GPU job claims a GPU."""
    running = ([run(f"a{i}", "lab/a", [("n0", 1)], started=NOW - HOUR) for i in range(2)]
               + [run("b-n0", "lab/b", [("n0", 6)], started=NOW - HOUR),
                  run("b-n1", "lab/b", [("n1", 8)], started=NOW - HOUR)])
    s = snap(nodes(2), flat_teams({"a": 1, "b": 1}), running,
             [pend("a16", "lab/a", 16, submit=NOW - 9 * HOUR), pend("a1", "lab/a", 1, submit=NOW - 8 * HOUR)])
    plan = policy.plan(s)
    assert "no running job is preempted for it" in plan.waiting["a16"]
    assert "asks for 16 GPUs" in plan.waiting["a16"] and plan.waiting_code["a16"] == "beyond-claim"
    assert "held for it" in plan.waiting["a1"]
