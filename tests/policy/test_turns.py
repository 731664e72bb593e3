"""Stories about turns: a gang larger than what its team is owed starts once its team's wait paid for it."""

import random
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.policy.policy_builders import (
    HOUR,
    NOW,
    check_plan,
    flat_teams,
    nodes,
    plan_with_nodes_freeing_first_in_full,
    pend,
    preempts,
    run,
    snap,
    starts,
)

from scheduling.policy import BudgetPolicy, PolicyConfig, Reservation, Shortfall, Start

policy = BudgetPolicy()


def _cluster(protected_b: bool = False, gone: float = 7 * 10 * HOUR, age_b: float = 5 * 60, **cfg):
    """4 x 8 GPUs; lab/a (a quarter of the budget: 8 GPUs) runs a 1-GPU job and has waited 10 hours, 7 GPUs
    short of its share, for a 16-GPU gang; lab/b fills the rest (past its protected hour unless ``protected_b``:
    then started ``age_b`` seconds ago)."""
    started = NOW - age_b if protected_b else NOW - 10 * HOUR
    running = [run("a0", "lab/a", [("n0", 1)]), run("b0", "lab/b", [("n0", 7)]),
               run("b1", "lab/b", [("n1", 8)], started=started), run("b2", "lab/b", [("n2", 6)], started=started),
               run("b3", "lab/b", [("n3", 8)], started=started)]
    pending = [pend("big", "lab/a", 16, submit=NOW - 10 * HOUR, gpus_per_node=8)]
    s = snap(nodes(4), flat_teams({"a": 1, "b": 3}), running, pending, **cfg)
    return s.__class__(**{**{f: getattr(s, f) for f in s.__dataclass_fields__},
                          "shortfall": Shortfall(NOW - 60, {"lab/a": (gone, 7.0)})})


def test_a_gang_larger_than_its_team_is_owed_gets_a_turn_once_its_wait_paid_for_it():
    """lab/a is owed 7 GPUs and may not claim 16 (neither its first job nor half owed); its 70 GPU-hours gone
    without pay for the 9 GPUs beyond what it is owed over the job's protected hour. The nodes that free first
    (n1 and n2, lab/b's jobs past protection; n0 holds lab/a's own job) are taken for it, and it starts protected
    once the victims have checkpointed."""
    s = _cluster()
    plan = policy.plan(s)
    check_plan(s, plan)
    pre = preempts(plan)
    assert set(pre) == {"b1", "b2"} and all(p.reason == "turn" and p.for_job == "big" for p in pre.values())
    (res,) = plan.reservations
    assert res.kind == "turn-hold" and dict(res.placement) == {"n1": 8, "n2": 8}
    assert "held for it" in plan.waiting["big"]
    after = snap(s.nodes, s.teams, [r for r in s.running if r.id not in pre], s.pending, plan.reservations,
                 now=NOW + 120)
    plan2 = policy.plan(after)
    check_plan(after, plan2)
    start = starts(plan2)["big"]
    assert dict(start.placement) == {"n1": 8, "n2": 8} and not start.scavenger  # protected: the turn was paid


def test_a_turns_victims_leave_their_teams_share_at_once():
    """As in the story above, but lab/b also has a 1-GPU job waiting and n0 one free GPU. Before the turn lab/b runs
    28 GPUs against an entitlement of 24; the turn takes 14 of them, so the job starts as lab/b's own work (protected),
    not as borrowed work."""
    s = _cluster()
    running = [replace(r, gpus=6, placement=(("n0", 6),)) if r.id == "b0" else r for r in s.running]
    s = replace(s, running=tuple(running), pending=s.pending + (pend("b-next", "lab/b", 1),))
    plan = policy.plan(s)
    check_plan(s, plan)
    assert set(preempts(plan)) == {"b1", "b2"}
    assert starts(plan)["b-next"].placement == (("n0", 1),) and not starts(plan)["b-next"].scavenger


def test_a_turn_whose_nodes_are_free_starts_its_job_protected_at_once():
    """The turn handed back holds n1 and n2, whose jobs have ended since: the gang starts there now, protected (its
    team's wait paid for its protected time), without waiting for a hold."""
    s = _cluster()
    turn = Reservation("big", (("n1", 8), ("n2", 8)), NOW + HOUR, "turn", NOW - 600)
    s = replace(s, running=tuple(r for r in s.running if r.id not in ("b1", "b2")), reservations=(turn,))
    plan = policy.plan(s)
    check_plan(s, plan)
    start = starts(plan)["big"]
    assert dict(start.placement) == {"n1": 8, "n2": 8} and not start.scavenger and not preempts(plan)


def test_a_turn_lends_its_free_gpus_until_its_last_half_hour():
    """lab/b's jobs started 5 minutes ago, inside their protected hour: the turn waits on n1 and n2 (n2 has two
    free GPUs) and lends those two GPUs to a job of lab/c, as borrowed work it takes back. 40 minutes into their
    hour, the turn keeps them free instead: a loan would only be preempted 20 minutes later."""
    for age, lends in ((5 * 60, True), (40 * 60, False)):
        s = _cluster(protected_b=True, age_b=age)
        s = s.__class__(**{**{f: getattr(s, f) for f in s.__dataclass_fields__},
                           "teams": flat_teams({"a": 1, "b": 3, "c": 1}),
                           "pending": s.pending + (pend("c0", "lab/c", 1),)})
        plan = policy.plan(s)
        check_plan(s, plan)
        assert not preempts(plan)
        (res,) = plan.reservations
        assert res.kind == "turn" and res.job_id == "big" and "n2" in dict(res.placement)
        assert plan.waiting["big"].startswith("its turn") and plan.waiting_code["big"] == "turn"
        if lends:
            lent = starts(plan)["c0"]
            assert lent.placement == (("n2", 1),) and lent.scavenger
        else:
            assert "c0" not in starts(plan)


def test_a_turn_takes_its_own_loans_at_once_but_borrowed_work_there_before_it_keeps_its_minimum_run():
    """The turn, made a minute ago, finds lab/b's jobs on n1 and n2 past their protection. On n2 also run two
    requeued jobs of lab/c (their fourth runs) as borrowed work: one it lent its GPUs to 30 s ago, which goes with
    the rest at once, and one there since 8 minutes before the turn, still inside the 10 minutes a repeat victim is
    kept for: the turn waits for it. Started three hours ago, it goes too."""
    def plan_for(old_started: float):
        s = _cluster()
        running = s.running + (run("c-old", "lab/c", [("n2", 1)], started=old_started, scavenger=True, runs=4),
                               run("c-loan", "lab/c", [("n2", 1)], started=NOW - 30, scavenger=True, runs=4))
        turn = Reservation("big", (("n1", 8), ("n2", 8)), NOW + HOUR, "turn", NOW - 60)
        s = replace(s, running=running, teams=flat_teams({"a": 1, "b": 3, "c": 1}), reservations=(turn,))
        plan = policy.plan(s)
        check_plan(s, plan)
        return plan

    plan = plan_for(NOW - 540)
    assert not preempts(plan) and [r.kind for r in plan.reservations] == ["turn"]
    plan = plan_for(NOW - 3 * HOUR)
    assert {k: p.for_job for k, p in preempts(plan).items()} == dict.fromkeys(("b1", "b2", "c-loan", "c-old"), "big")


def test_no_turn_before_the_wait_paid_for_it_or_when_turns_are_off():
    for s in (_cluster(gone=8 * HOUR), _cluster(gang_turns=False)):
        plan = policy.plan(s)
        check_plan(s, plan)
        assert not preempts(plan) and not [r for r in plan.reservations if r.kind.startswith("turn")]
        assert "big" in plan.waiting


def test_a_turn_never_takes_its_own_teams_in_budget_work_and_one_turn_at_a_time():
    """With lab/a's own job, submitted before the gang, on every node, the turn can never be ready: none is made
    (it would hold nodes for nothing); and a second team's turn waits while one is under way."""
    s = _cluster()
    own = [run(f"a{i}", "lab/a", [(f"n{i}", 1)]) for i in range(4)]
    s1 = snap(s.nodes, s.teams, own + [run(f"b{i}", "lab/b", [(f"n{i}", 7)]) for i in range(4)], s.pending)
    s1 = s1.__class__(**{**{f: getattr(s1, f) for f in s1.__dataclass_fields__}, "shortfall": s.shortfall})
    plan = policy.plan(s1)
    check_plan(s1, plan)
    assert not preempts(plan) and not plan.reservations
    # one turn under way (lab/c's, on n2 and n3): lab/a's paid turn waits for it
    teams = flat_teams({"a": 1, "b": 3, "c": 1})
    pending = s.pending + (pend("cbig", "lab/c", 16, submit=NOW - 10 * HOUR, gpus_per_node=8),)
    under_way = Reservation("cbig", (("n2", 8), ("n3", 8)), NOW + HOUR, "turn", NOW - 60)
    s2 = snap(s.nodes, teams, s.running, pending, (under_way,))
    s2 = s2.__class__(**{**{f: getattr(s2, f) for f in s2.__dataclass_fields__}, "shortfall": s.shortfall})
    plan = policy.plan(s2)
    check_plan(s2, plan)
    assert {p.for_job for p in preempts(plan).values()} <= {"cbig"}
    assert [r.job_id for r in plan.reservations if r.kind.startswith("turn")] == ["cbig"]


def test_a_team_whose_lead_ranked_a_gang_first_saves_its_share_for_it():
    """lab/a (a quarter of the budget) asks for 16 GPUs, more than it is owed, and its lead ranked that gang first:
    its 1-GPU jobs behind it wait (they would keep the team at its share, and a team at its share never pays for a
    turn), and say why. In FIFO order (the same ranks), they start on the free GPUs as before."""
    running = [run(f"b{i}", "lab/b", [(f"n{i}", k)], started=NOW - 600) for i, k in enumerate((8, 8, 4))]
    for gang_rank, saves in ((-1, True), (0, False)):
        pending = [pend("big", "lab/a", 16, submit=NOW - 2 * HOUR, gpus_per_node=8, rank=gang_rank),
                   pend("a1", "lab/a", 1), pend("a2", "lab/a", 1)]
        s = snap(nodes(4), flat_teams({"a": 1, "b": 3}), running, pending)
        plan = policy.plan(s)
        check_plan(s, plan)
        st = starts(plan)
        assert "big" not in st and ("a1" in st and "a2" in st) is not saves
        if saves:
            assert plan.waiting["a1"].startswith("waits behind big, the 16-GPU job its team's lead ranked first")
            assert plan.waiting_code["a1"] == "lead-order"


def test_a_team_whose_lead_ranked_a_job_of_one_node_first_saves_its_share_and_then_claims_for_it():
    """lab/a (share 8 of 16) runs its share in 1-GPU jobs on both nodes, as does lab/b; one of a's jobs has just
    ended. Its lead ranked an 8-GPU job first: a's next 1-GPU job would refill the freed GPU, and a, back at its
    share, would never claim a node for the 8-GPU job (no node frees whole by itself on a busy cluster). So the
    team saves: its later jobs wait and say why. Once a's jobs have ended, a is owed the job whole and claims a node
    for it. In FIFO order (the same ranks) the 1-GPU job starts as before."""
    for head_rank, saves in ((-1, True), (0, False)):
        running = ([run(f"a{i}", "lab/a", [(f"n{i % 2}", 1)], started=NOW - 3 * HOUR) for i in range(7)]
                   + [run(f"b{i}", "lab/b", [(f"n{i % 2}", 1)], started=NOW - 3 * HOUR) for i in range(8)])
        pending = [pend("a-eight", "lab/a", 8, submit=NOW - 2 * HOUR, rank=head_rank), pend("a-one", "lab/a", 1)]
        s = snap(nodes(2), flat_teams({"a": 1, "b": 1}), running, pending)
        plan = policy.plan(s)
        check_plan(s, plan)
        assert ("a-one" in starts(plan)) is not saves
        if not saves:  # its reason says how to get it going
            assert plan.waiting["a-eight"].endswith("a lead of lab/a can rank it first to save the team's share "
                                                    "for it")
        if saves:
            assert plan.waiting_code["a-one"] == "lead-order"
            assert plan.waiting["a-one"].startswith("waits behind a-eight, the 8-GPU job its team's lead ranked "
                                                     "first: the team saves its share for it (it claims GPUs")
    # later: a's jobs have ended (b still runs its 8): a is owed 8 and claims a node for the job
    running = [run(f"b{i}", "lab/b", [(f"n{i % 2}", 1)], started=NOW - 3 * HOUR) for i in range(8)]
    running += [run(f"c{i}", "lab/c", [(f"n{i % 2}", 1)], scavenger=True) for i in range(8)]
    pending = [pend("a-eight", "lab/a", 8, submit=NOW - 5 * HOUR, rank=-1), pend("a-one", "lab/a", 1)]
    s = snap(nodes(2), flat_teams({"a": 2, "b": 1, "c": 1}), running, pending)
    plan = policy.plan(s)
    check_plan(s, plan)
    assert {p.for_job for p in preempts(plan).values()} == {"a-eight"} and "a-one" not in starts(plan)


def test_turns_off_means_no_saving():
    running = [run(f"b{i}", "lab/b", [(f"n{i}", k)], started=NOW - 600) for i, k in enumerate((8, 8, 4))]
    pending = [pend("big", "lab/a", 16, submit=NOW - 2 * HOUR, gpus_per_node=8, rank=-1), pend("a1", "lab/a", 1)]
    s = snap(nodes(4), flat_teams({"a": 1, "b": 3}), running, pending, gang_turns=False)
    plan = policy.plan(s)
    check_plan(s, plan)
    assert "a1" in starts(plan)


def test_a_paid_turn_waits_for_a_short_drain_unless_its_job_has_waited_a_day():
    """lab/b's jobs are long-contract jobs an hour into their 24 protected hours: holding n1 and n2 for the 23 hours
    their drain takes would keep them from everyone's claims for far longer than the protected hour the turn buys.
    The paid turn waits instead, holding nothing (lab/c's job starts there, protected); once the gang has waited a
    day it takes the nodes all the same, lending their free GPUs."""
    for waited, kind in ((10 * HOUR, "turn-wait"), (25 * HOUR, "turn")):
        s = _cluster()
        running = [r if r.id == "a0" else r.__class__(**{**{f: getattr(r, f) for f in r.__dataclass_fields__},
                                                          "contract": "long", "started_s": NOW - HOUR})
                   for r in s.running]
        s = s.__class__(**{**{f: getattr(s, f) for f in s.__dataclass_fields__}, "running": tuple(running),
                           "teams": flat_teams({"a": 1, "b": 3, "c": 1}),
                           "pending": (pend("big", "lab/a", 16, submit=NOW - waited, gpus_per_node=8),
                                       pend("c0", "lab/c", 1))})
        plan = policy.plan(s)
        check_plan(s, plan)
        assert not preempts(plan)
        (res,) = plan.reservations
        assert res.kind == kind and res.job_id == "big"
        assert starts(plan)["c0"].scavenger is (kind == "turn")
        assert plan.waiting["big"].startswith("its turn")


def test_a_paid_turn_handed_back_keeps_its_job_and_holds_nothing_while_it_waits():
    """As in the story above, the gang's paid turn waits for a shorter drain. Handed back a minute later, it is still
    the gang's (since the first cycle) though lab/c, which has gone without more of its share since, now has a gang
    at the head of its queue; and it holds nothing: lab/c's 1-GPU job starts on n2's free GPUs, protected."""
    s = _cluster()
    running = tuple(r if r.id == "a0" else replace(r, contract="long", started_s=NOW - HOUR) for r in s.running)
    s = replace(s, running=running, teams=flat_teams({"a": 1, "b": 3, "c": 1}),
                pending=(pend("big", "lab/a", 16, submit=NOW - 10 * HOUR, gpus_per_node=8),))
    plan = policy.plan(s)
    (paid,) = plan.reservations
    assert (paid.job_id, paid.kind, paid.since_s) == ("big", "turn-wait", NOW)
    pending = s.pending + (pend("cbig", "lab/c", 16, submit=NOW - 20 * HOUR, gpus_per_node=8), pend("c0", "lab/c", 1))
    s2 = replace(s, now_s=NOW + 60, reservations=plan.reservations, pending=pending,
                 shortfall=Shortfall(NOW, {"lab/a": (70 * HOUR, 7.0), "lab/c": (200 * HOUR, 6.0)}))
    plan2 = policy.plan(s2)
    check_plan(s2, plan2)
    (paid,) = plan2.reservations
    assert (paid.job_id, paid.kind, paid.since_s) == ("big", "turn-wait", NOW)
    assert starts(plan2)["c0"] == Start("c0", (("n2", 1),), scavenger=False)


def test_of_two_turns_handed_back_only_the_oldest_is_kept():
    s = _cluster()
    teams = flat_teams({"a": 1, "b": 3, "c": 1})
    pending = s.pending + (pend("cbig", "lab/c", 16, submit=NOW - 10 * HOUR, gpus_per_node=8),)
    both = (Reservation("cbig", (("n1", 8), ("n2", 8)), NOW + HOUR, "turn-wait", NOW - 120),
            Reservation("big", (("n1", 8), ("n3", 8)), NOW + HOUR, "turn-wait", NOW - 60))
    s2 = snap(s.nodes, teams, s.running, pending, both)
    plan = policy.plan(s2)
    check_plan(s2, plan)
    turns = [r for r in plan.reservations if r.kind.startswith("turn")]
    assert [r.job_id for r in turns] == ["cbig"] and {p.for_job for p in preempts(plan).values()} <= {"cbig"}


def test_a_debug_session_keeps_off_a_turns_lent_gpus_while_other_gpus_are_free():
    """A session is never a turn's victim, so on the turn's lent GPUs (n2's two) it would hold the 16-GPU gang off
    for up to its four hours: it takes one of n4's three free GPUs instead (best fit alone would pick n2). With
    n4 full it still starts at once, on the lent GPUs, rather than waiting or stopping anyone."""
    s = _cluster(protected_b=True)
    (turn,) = policy.plan(s).reservations
    assert turn.kind == "turn" and "n2" in dict(turn.placement)
    for n4_used, where in ((5, "n4"), (8, "n2")):
        running = s.running + (run("b4", "lab/b", [("n4", n4_used)], started=NOW - 300, contract="long"),)
        pending = s.pending + (pend("dbg", "lab/c", 1, submit=NOW - 5, contract="debug"),)
        s2 = snap(nodes(5), flat_teams({"a": 1, "b": 3, "c": 1}), running, pending, (turn,), now=NOW + 60)
        plan = policy.plan(s2)
        check_plan(s2, plan)
        assert dict(starts(plan)["dbg"].placement) == {where: 1} and not preempts(plan)
        assert [r.kind for r in plan.reservations if r.job_id == "big"] == ["turn"]


def test_a_turn_takes_its_own_teams_jobs_submitted_after_it():
    """lab/a's 1-GPU jobs submitted after the gang started on n1-n3 because the gang could not: they are behind it
    in the team's order, so its turn takes them with the rest (n0's job, submitted before it, stays)."""
    running = [run("a0", "lab/a", [("n0", 1)]), run("b0", "lab/b", [("n0", 7)])]
    for i in (1, 2, 3):
        running += [run(f"later{i}", "lab/a", [(f"n{i}", 1)], started=NOW - 5 * HOUR),
                    run(f"b{i}", "lab/b", [(f"n{i}", 7)])]
    s = snap(nodes(4), flat_teams({"a": 1, "b": 3}), running,
             [pend("big", "lab/a", 16, submit=NOW - 10 * HOUR, gpus_per_node=8)])
    s = s.__class__(**{**{f: getattr(s, f) for f in s.__dataclass_fields__},
                       "shortfall": Shortfall(NOW - 60, {"lab/a": (70 * HOUR, 4.0)})})
    plan = policy.plan(s)
    check_plan(s, plan)
    (res,) = plan.reservations
    assert res.kind == "turn-hold" and "n0" not in dict(res.placement)
    pre = preempts(plan)
    assert "a0" not in pre and all(p.reason == "turn" for p in pre.values())
    assert {f"later{n[1]}" for n, _ in res.placement} <= set(pre)


def test_a_turn_waits_for_the_debug_sessions_on_its_nodes_and_no_new_one_lands_there():
    """A debug session is never a turn's victim, and a pool the turn needs is seldom free of sessions: once
    nothing else holds the turn back, its free GPUs are kept from new sessions and loans, and the sessions there run
    to their end (within their four hours)."""
    s = _cluster()
    teams = flat_teams({"a": 1, "b": 3, "c": 1})
    running = [r for r in s.running if r.id != "b2"] + [
        run("b2", "lab/b", [("n2", 6)]), run("s1", "lab/c", [("n2", 1)], started=NOW - 1800, contract="debug")]
    turn = Reservation("big", (("n1", 8), ("n2", 8)), NOW + HOUR, "turn", NOW - 600)
    pending = s.pending + (pend("s2", "lab/c", 1, submit=NOW - 5, contract="debug"), pend("c0", "lab/c", 1))
    s2 = snap(s.nodes, teams, running, pending, (turn,))
    s2 = s2.__class__(**{**{f: getattr(s2, f) for f in s2.__dataclass_fields__}, "shortfall": s.shortfall})
    plan = policy.plan(s2)
    check_plan(s2, plan)
    assert "s1" not in preempts(plan)
    assert not any(n in ("n1", "n2") for a in starts(plan).values() for n, _ in a.placement)
    assert [(r.kind, dict(r.placement)) for r in plan.reservations if r.job_id == "big"] == [
        ("turn", {"n1": 8, "n2": 8})]


def test_a_turn_handed_back_for_a_job_of_one_node_is_dropped():
    """Turns are for gangs over several nodes (§7): a caller's stale or invented turn for a 3-GPU job holds
    nothing and takes nothing."""
    s = _cluster()
    pending = s.pending + (pend("small", "lab/a", 3, submit=NOW - 10 * HOUR),)
    bad = Reservation("small", (("n1", 3),), NOW + HOUR, "turn", NOW - 60)
    s2 = snap(s.nodes, s.teams, s.running, pending, (bad,))
    plan = policy.plan(s2)
    check_plan(s2, plan)
    assert not any(r.job_id == "small" and r.kind.startswith("turn") for r in plan.reservations)
    assert not any(p.for_job == "small" and p.reason == "turn" for p in preempts(plan).values())


def test_a_turns_victims_started_as_scavenger_get_the_scavenger_contracts_notice():
    """b1 borrowed its node (started as scavenger work): the turn gives it the scavenger contract's 30 s of
    notice; b2, started within lab/b's share, keeps its standard contract's 10 minutes (b3, still protected for
    half an hour, is left). The hold lasts for the longest of them."""
    s = _cluster()
    young = {"b1": {"scavenger": True}, "b3": {"started_s": NOW - 1800}}
    s = replace(s, running=tuple(replace(r, **young.get(r.id, {})) for r in s.running))
    plan = policy.plan(s)
    check_plan(s, plan)
    pre = preempts(plan)
    assert pre["b1"].grace_s == 30 and pre["b2"].grace_s == 600
    (res,) = plan.reservations
    assert res.kind == "turn-hold" and res.expires_s == NOW + 600 + 600


def _starved(waited: float, own_job: bool = False, gone: float | None = None, contract: str = "standard"):
    """4 x 8 GPUs, every node filled by an 8-GPU job of lab/b (past protection). lab/a, entitled to 4 GPUs, runs
    nothing (or a 1-GPU job on n3, ``own_job``) and waits ``waited`` for an 8-GPU job of one node: no claim can
    free a node for it (lab/b would lose 8 for lab/a's gain of 4). Its team has gone without ``gone`` GPU-hours of
    its share (by default 4 GPUs over the whole wait)."""
    running = [run(f"b{i}", "lab/b", [(f"n{i}", 8)]) for i in range(3)]
    running.append(run("b3", "lab/b", [("n3", 7)]) if own_job else run("b3", "lab/b", [("n3", 8)]))
    if own_job:
        running.append(run("a0", "lab/a", [("n3", 1)]))
    pending = [pend("eight", "lab/a", 8, submit=NOW - waited, contract=contract)]
    s = snap(nodes(4), flat_teams({"a": 1, "b": 7}), running, pending)
    return replace(s, shortfall=Shortfall(NOW - 60, {"lab/a": (4 * (waited if gone is None else gone), 4.0)}))


def test_a_job_of_one_node_of_a_team_that_runs_nothing_gets_a_turn_after_a_day():
    """Left to natural ends, lab/a's job would wait until a whole node frees by chance, which on a busy cluster of
    small jobs can take days while the team runs nothing at all. After a day it gets a turn: the node that frees
    first is freed for it, and it starts protected once the victim has checkpointed."""
    s = _starved(25 * HOUR)
    plan = policy.plan(s)
    check_plan(s, plan)
    pre = preempts(plan)
    assert list(pre) == ["b0"] and pre["b0"].reason == "turn" and pre["b0"].for_job == "eight"
    (res,) = plan.reservations
    assert res.kind == "turn-hold" and res.placement == (("n0", 8),)
    after = snap(s.nodes, s.teams, [r for r in s.running if r.id != "b0"], s.pending, plan.reservations,
                 now=NOW + 120)
    plan2 = policy.plan(after)
    check_plan(after, plan2)
    start = starts(plan2)["eight"]
    assert start.placement == (("n0", 8),) and not start.scavenger


def test_a_job_of_one_node_gets_no_turn_before_a_day_nor_while_its_team_runs_batch_work():
    """Before its day is up, the job waits and its reason says when its turn comes: after the day, or later when
    its team's wait has not yet paid for the protected run it buys (a ``long`` job's 24 hours for the 4 GPUs beyond
    its share: 96 GPU-hours, 40 gone without, 14 hours more at 4 GPUs short). A team that runs batch work is not
    starved: its job of one node waits for natural ends and claims as before (§6)."""
    for s, when in ((_starved(20 * HOUR), "in about 4.0 h"),
                    (_starved(25 * HOUR, gone=10 * HOUR, contract="long"), "in about 14.0 h")):
        plan = policy.plan(s)
        check_plan(s, plan)
        assert not preempts(plan) and not plan.reservations
        assert "runs no batch work, it gets a turn" in plan.waiting["eight"] and when in plan.waiting["eight"]
    for s in (_starved(25 * HOUR, own_job=True), replace(_starved(25 * HOUR), config=PolicyConfig(gang_turns=False))):
        plan = policy.plan(s)
        check_plan(s, plan)
        assert not preempts(plan) and not [r for r in plan.reservations if r.kind.startswith("turn")]
        assert "gets a turn" not in plan.waiting["eight"]


def _full_cluster_waiting_a_day(rnd: random.Random):
    """A random full cluster of 8-GPU nodes where lab/a, with a small share, has waited a day or more for a job of
    2-24 GPUs (``head``) and has gone without much of its share: (snapshot, pending jobs)."""
    cluster = nodes(rnd.randint(2, 5))
    teams = ["lab/a"] * rnd.choice([0, 0, 2]) + ["lab/b"] * 4 + ["lab/c"] * 3  # lab/a runs work on some clusters
    running = []
    for nd in cluster:
        left = nd.gpus
        while left:
            k = min(left, rnd.choice([1, 1, 2, 4, 8]))
            left -= k
            contract = rnd.choice(["standard", "standard", "long", "scavenger", "debug"])
            running.append(run(f"r{len(running)}", rnd.choice(teams), [(nd.id, k)],
                               started=NOW - rnd.uniform(0, 30 * HOUR), contract=contract,
                               scavenger=contract == "scavenger" or rnd.random() < 0.1, preempting=rnd.random() < 0.05))
    gpus = rnd.choice([2, 4, 8, 8, 16, 24])
    pending = [pend("head", "lab/a", gpus, submit=NOW - rnd.uniform(20 * HOUR, 40 * HOUR),
                    contract=rnd.choice(["standard", "long"]))]
    pending += [pend(f"q{i}", rnd.choice(["lab/a", "lab/b", "lab/c"]), rnd.choice([1, 2, 8]),
                     submit=NOW - rnd.uniform(0, 10 * HOUR)) for i in range(rnd.randint(0, 4))]
    s = snap(cluster, flat_teams({"a": 1, "b": rnd.randint(2, 7), "c": rnd.randint(1, 3)}), running, pending)
    s = replace(s, shortfall=Shortfall(NOW - 60, {"lab/a": (rnd.uniform(0, 200) * HOUR, rnd.uniform(1, 4))}))
    return s, pending


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_turns_bend_no_rule(seed):
    """Random full clusters of 8-GPU nodes where lab/a, with a small share, has waited a day or more for a job of
    2-24 GPUs and has gone without much of its share: the plan keeps every rule (check_plan), a turn's victims are
    never its own team's in-budget work ahead of it in the team's order (the stories above pin that rule down), and
    a job that starts on its turn starts protected."""
    s, pending = _full_cluster_waiting_a_day(random.Random(seed))
    plan = policy.plan(s)
    check_plan(s, plan)
    by_id = {r.id: r for r in s.running}
    head = pending[0]
    pre = preempts(plan)
    for p in pre.values():
        if p.reason == "turn":
            r = by_id[p.job_id]
            assert p.for_job == "head"
            assert r.team != "lab/a" or r.scavenger or (r.rank, r.submit_s) > (head.rank, head.submit_s)
    # the next cycle, once the victims (and the jobs already in their grace) are gone: a job held for on its turn
    # starts, protected
    after = replace(s, now_s=NOW + 120, running=tuple(r for r in s.running if r.id not in pre and not r.preempting),
                    pending=tuple(j for j in s.pending if j.id not in starts(plan)), reservations=plan.reservations,
                    shortfall=plan.shortfall)
    plan2 = policy.plan(after)
    check_plan(after, plan2)
    if any(r.job_id == "head" and r.kind == "turn-hold" for r in plan.reservations):
        assert not starts(plan2)["head"].scavenger


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_turns_reading_only_the_nodes_they_need_change_no_plan(seed):
    """On the full clusters above, where turns and gang reservations look for the nodes that free first, reading
    every running job and every node's time at each look gives the same plan (``nodes_freeing_first_in_full``)."""
    s, _ = _full_cluster_waiting_a_day(random.Random(seed))
    assert plan_with_nodes_freeing_first_in_full(s) == policy.plan(s)


def _half_node_turn(on_n2: list, teams) -> tuple:
    """lab/a (owed 7, 70 GPU-hours gone) has waited 10 hours for a 12-GPU job of free shape: its turn takes n1
    (lab/b's job past protection) whole and 4 GPUs of n2, where ``on_n2`` runs; n0 and n3 hold protected work."""
    running = [run("a0", "lab/a", [("n0", 1)]), run("b0", "lab/b", [("n0", 7)], started=NOW - 300),
               run("b1", "lab/b", [("n1", 8)]), *on_n2, run("b3", "lab/b", [("n3", 8)], started=NOW - 300)]
    s = snap(nodes(4), teams, running, [pend("big", "lab/a", 12, submit=NOW - 10 * HOUR)])
    s = replace(s, shortfall=Shortfall(NOW - 60, {"lab/a": (7 * 10 * HOUR, 7.0)}))
    plan = policy.plan(s)
    check_plan(s, plan)
    pre = preempts(plan)
    assert all(p.reason == "turn" for p in pre.values())
    assert dict(plan.reservations[0].placement) == {"n1": 8, "n2": 4}
    return set(pre)


def test_a_turn_takes_a_spent_teams_work_on_a_node_before_in_budget_work_started_later():
    """On the node the turn needs only half of, the job of lab/c (its budget spent: scavenger work, whatever it
    started as) goes, not lab/b's in-budget job, though lab/b's started later."""
    on_n2 = [run("c2", "lab/c", [("n2", 4)], started=NOW - 3 * HOUR),
             run("b2", "lab/b", [("n2", 4)], started=NOW - 2 * HOUR)]
    assert _half_node_turn(on_n2, flat_teams({"a": 1, "b": 2, "c": 1}, spent=("c",))) == {"b1", "c2"}


def test_a_turn_takes_a_job_past_its_protection_on_a_node_before_waiting_for_a_debug_session_there():
    """On the node the turn needs only half of, lab/b's debug session (started last, never taken) and lab/b's batch
    job past its protected time: the batch job goes and the turn is ready now, instead of waiting hours for the
    session's end."""
    on_n2 = [run("dbg", "lab/b", [("n2", 4)], contract="debug", started=NOW - 600),
             run("b2", "lab/b", [("n2", 4)], started=NOW - 2 * HOUR)]
    assert _half_node_turn(on_n2, flat_teams({"a": 1, "b": 3})) == {"b1", "b2"}
