"""Stories about preemption: contracts bind it, it is minimal and purposeful, and it never ping-pongs."""

from dataclasses import replace

import pytest

from tests.policy.policy_builders import (
    HOUR,
    NOW,
    check_plan,
    flat_teams,
    nodes,
    pend,
    preempts,
    run,
    snap,
    starts,
)

from scheduling.policy import DOWN, DRAINING, BudgetPolicy, NodeState, Reservation, Shortfall, TeamState

policy = BudgetPolicy()


def full_node_of(team: str, node: str = "n0", started: float = NOW - 10 * HOUR, n: int = 8, prefix: str = "r",
                 **kw):
    return [run(f"{prefix}{i}", team, [(node, 1)], started=started, **kw) for i in range(n)]


def test_under_share_team_preempts_over_share_team_after_waiting():
    """a holds all 8 GPUs; b (equal budget) has waited 20 min: one of a's jobs yields, GPUs held for b."""
    s = snap(nodes(1), flat_teams({"a": 1, "b": 1}), full_node_of("lab/a"),
             [pend("b0", "lab/b", submit=NOW - 1200)])
    plan = policy.plan(s)
    check_plan(s, plan)
    pre = preempts(plan)
    assert len(pre) == 1
    (p,) = pre.values()
    assert p.for_job == "b0" and p.grace_s == 600 and p.reason == "fair-share"
    (hold,) = plan.reservations
    assert hold.job_id == "b0" and hold.placement == (("n0", 1),) and hold.kind == "hold"
    assert "held" in plan.waiting["b0"] and plan.waiting_code["b0"] == "held"


def test_no_preemption_before_the_wait_threshold():
    s = snap(nodes(1), flat_teams({"a": 1, "b": 1}), full_node_of("lab/a"), [pend("b0", "lab/b", submit=NOW - 60)])
    plan = policy.plan(s)
    assert not preempts(plan)
    assert "preempted" in plan.waiting["b0"] and plan.waiting_code["b0"] == "below-share"


def test_protected_time_is_never_violated():
    """a's jobs started 30 min ago under a 1 h protected contract: b waits, whatever its share."""
    s = snap(nodes(1), flat_teams({"a": 1, "b": 1}), full_node_of("lab/a", started=NOW - 1800),
             [pend("b0", "lab/b", submit=NOW - 5 * HOUR)])
    plan = policy.plan(s)
    assert not preempts(plan)
    assert "none can be freed" in plan.waiting["b0"] and "protected time" in plan.waiting["b0"]
    assert plan.waiting_code["b0"] == "no-plan"


def test_no_preemption_that_would_push_the_victim_below_its_share():
    """a runs 4 (its share of 8), b runs 4; b's extra job must not take a GPU from a (no ping-pong)."""
    running = full_node_of("lab/a", n=4) + full_node_of("lab/b", n=4, prefix="s")
    s = snap(nodes(1), flat_teams({"a": 1, "b": 1}), running,
             [pend("a9", "lab/a", submit=NOW - 5 * HOUR), pend("b9", "lab/b", submit=NOW - 5 * HOUR)])
    plan = policy.plan(s)
    assert not preempts(plan)


def test_team_at_its_share_does_not_preempt_again_for_more():
    """b runs 3 of its 4 entitled and asks for 2 more: it would end above its share, so no preemption."""
    running = full_node_of("lab/a", n=5) + full_node_of("lab/b", n=3, prefix="s")
    s = snap(nodes(1), flat_teams({"a": 1, "b": 1}), running, [pend("b9", "lab/b", 2, submit=NOW - 5 * HOUR)])
    assert not preempts(policy.plan(s))


def test_scavengers_go_first_then_least_lost_work():
    running = [run("fresh-ckpt", "lab/a", [("n0", 1)], last_checkpoint_s=NOW - 60),
               run("old-ckpt", "lab/a", [("n0", 1)], last_checkpoint_s=NOW - 5 * HOUR),
               run("scav", "lab/c", [("n0", 1)], contract="scavenger", scavenger=True, started=NOW - 60)]
    running += full_node_of("lab/a", n=5, prefix="x")
    s = snap(nodes(1), flat_teams({"a": 1, "b": 1, "c": 1}, spent=("c",)), running,
             [pend("b0", "lab/b", submit=NOW - HOUR), pend("b1", "lab/b", submit=NOW - HOUR)])
    plan = policy.plan(s)
    check_plan(s, plan)
    # one preemption plan per team and cycle: the scavenger is the cheapest victim
    assert set(preempts(plan)) == {"scav"}
    running2 = [r for r in running if r.id != "scav"] + [run("x9", "lab/a", [("n0", 1)])]
    s2 = snap(nodes(1), flat_teams({"a": 1, "b": 1, "c": 1}), running2,
              [pend("b0", "lab/b", submit=NOW - HOUR), pend("b1", "lab/b", submit=NOW - HOUR)])
    plan2 = policy.plan(s2)
    check_plan(s2, plan2)
    assert set(preempts(plan2)) == {"fresh-ckpt"}


def test_gang_job_frees_whole_nodes_choosing_the_nearly_free_ones():
    """b needs 16 GPUs as 2 x 8. n0 and n1 hold 1 job each, n2 and n3 are full: only n0, n1 are touched."""
    running = [run("lone0", "lab/a", [("n0", 1)]), run("lone1", "lab/a", [("n1", 1)])]
    running += full_node_of("lab/a", "n2", prefix="p") + full_node_of("lab/a", "n3", prefix="q")
    # the free GPUs of n0/n1 are taken by a protected job each so nothing fits without preemption
    running += [run("prot0", "lab/a", [("n0", 7)], started=NOW - 60), run("prot1", "lab/a", [("n1", 3)])]
    s = snap(nodes(4), flat_teams({"a": 1, "b": 1}), running,
             [pend("big", "lab/b", 16, gpus_per_node=8, submit=NOW - HOUR)])
    plan = policy.plan(s)
    check_plan(s, plan)
    pre = preempts(plan)
    # prot0 is protected, so n0 cannot be freed: the plan uses the nearly free n1 plus one full node
    assert "prot0" not in pre and "lone0" not in pre
    assert {"lone1", "prot1"} <= set(pre) and len(pre) == 10
    assert all(p.for_job == "big" for p in pre.values())
    (hold,) = plan.reservations
    assert hold.placement[0] == ("n1", 8)


def test_gang_preemption_takes_the_cheapest_whole_nodes():
    running = [run("lone0", "lab/a", [("n0", 2)]), run("lone1", "lab/a", [("n1", 1)])]
    running += full_node_of("lab/a", "n2", prefix="p") + full_node_of("lab/a", "n3", prefix="q")
    running += [run("fill0", "lab/a", [("n0", 6)], started=NOW - 60, contract="scavenger", scavenger=True),
                run("fill1", "lab/a", [("n1", 7)], started=NOW - 60, contract="scavenger", scavenger=True)]
    s = snap(nodes(4), flat_teams({"a": 1, "b": 1}), running,
             [pend("big", "lab/b", 16, gpus_per_node=8, submit=NOW - HOUR)])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert set(preempts(plan)) == {"lone0", "lone1", "fill0", "fill1"}
    (hold,) = plan.reservations
    assert hold.placement == (("n0", 8), ("n1", 8))


def test_held_gpus_go_to_the_job_they_were_freed_for():
    """Next cycle: the victim is gone, b0's hold is honoured even though team a is first in line now."""
    hold = Reservation("b0", (("n0", 1),), expires_s=NOW + 900, kind="hold", since_s=NOW - 600)
    running = full_node_of("lab/a", n=7)
    s = snap(nodes(1), flat_teams({"a": 1, "b": 1}), running,
             [pend("a0", "lab/a", submit=NOW - 9 * HOUR), pend("b0", "lab/b", submit=NOW - HOUR)], [hold])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert set(starts(plan)) == {"b0"}
    assert not plan.reservations


def test_hold_blocks_others_while_victims_checkpoint():
    """The victim still runs (preempting): the single free GPU on n0 is held for b0's 2-GPU start."""
    hold = Reservation("b0", (("n0", 2),), expires_s=NOW + 900, kind="hold", since_s=NOW - 60)
    running = full_node_of("lab/a", n=6) + [run("victim", "lab/a", [("n0", 1)], preempting=True)]
    s = snap(nodes(1), flat_teams({"a": 1, "b": 1, "c": 1}), running,
             [pend("b0", "lab/b", 2, submit=NOW - HOUR), pend("c0", "lab/c", submit=NOW - HOUR)], [hold])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert not starts(plan)
    assert [r.job_id for r in plan.reservations] == ["b0"]


def test_drain_preempts_everything_on_the_node_with_its_grace():
    ns = (NodeState("n0", "H100", 8, health=DRAINING), NodeState("n1", "H100", 8))
    running = [run("young", "lab/a", [("n0", 2)], started=NOW - 60, contract="long"),
               run("other", "lab/a", [("n1", 2)])]
    s = snap(ns, flat_teams({"a": 1}), running, [pend("a1", "lab/a", 6)])
    plan = policy.plan(s)
    check_plan(s, plan)
    pre = preempts(plan)
    assert set(pre) == {"young"} and pre["young"].reason == "drain" and pre["young"].grace_s == 1800
    assert pre["young"].for_job is None
    assert starts(plan)["a1"].placement == (("n1", 6),)


def test_a_drain_gives_work_started_as_scavenger_the_scavenger_contracts_notice():
    ns = (NodeState("n0", "H100", 8, health=DRAINING), NodeState("n1", "H100", 8))
    running = [run("borrowed", "lab/a", [("n0", 2)], started=NOW - 60, scavenger=True),
               run("owned", "lab/a", [("n0", 2)], started=NOW - 60)]
    s = snap(ns, flat_teams({"a": 1}), running)
    plan = policy.plan(s)
    check_plan(s, plan)
    pre = preempts(plan)
    assert pre["borrowed"].grace_s == 30 and pre["owned"].grace_s == 600


def test_a_drain_gives_a_job_whose_contract_is_gone_no_notice():
    """(a contract deleted while its job ran): the job is stopped at once; nothing says how long it may save."""
    ns = (NodeState("n0", "H100", 8, health=DRAINING), NodeState("n1", "H100", 8))
    s = snap(ns, flat_teams({"a": 1}), [run("orphan", "lab/a", [("n0", 2)], contract="retired")])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert preempts(plan)["orphan"].reason == "drain" and preempts(plan)["orphan"].grace_s == 0


@pytest.mark.parametrize("health", [DRAINING, DOWN])
def test_a_team_whose_job_is_on_a_failing_node_is_owed_its_gpus_at_once(health):
    """A job being drained off a node, or on a node that went down (the caller's business), no longer counts as its
    team's: the team's next job may claim its share from a team above its own in the very cycle, instead of
    waiting out the drain's notice as if it still held 8 GPUs."""
    ns = (NodeState("n0", "H100", 8, health=health), NodeState("n1", "H100", 8), NodeState("n2", "H100", 8))
    running = [run("a0", "lab/a", [("n0", 8)]), run("b1", "lab/b", [("n1", 8)]),
               run("b2", "lab/b", [("n2", 8)], started=NOW - 5 * HOUR)]
    s = snap(ns, flat_teams({"a": 1, "b": 1}), running, [pend("a8", "lab/a", 8)])
    plan = policy.plan(s)
    check_plan(s, plan)
    pre = preempts(plan)
    assert pre["b2"].for_job == "a8" and set(pre) == ({"a0", "b2"} if health == DRAINING else {"b2"})
    assert health == DOWN or pre["a0"].reason == "drain"


def test_a_job_whose_victims_checkpoint_waits_for_its_hold_even_when_a_node_frees_meanwhile():
    """a8's GPUs on n0 are held while b1 checkpoints; n3 is free now, but a8 keeps to its hold and n3 stays for
    the walk's other jobs. Starting it on n3 and giving the hold back (as Slurm re-places a pending job each pass)
    was measured on every Philly case and left out: impact fell on 22 of 30 (docs/policy-history.md §6)."""
    running = [run("b1", "lab/b", [("n0", 8)], preempting=True, preempt_deadline_s=NOW + 500),
               run("b2", "lab/b", [("n1", 8)]), run("b3", "lab/b", [("n2", 8)])]
    hold = Reservation("a8", (("n0", 8),), NOW + 1100, "hold", NOW - 100)
    s = snap(nodes(4), flat_teams({"a": 2, "b": 1}), running, [pend("a8", "lab/a", 8)], reservations=(hold,))
    plan = policy.plan(s)
    check_plan(s, plan)
    assert not starts(plan) and not preempts(plan) and plan.waiting_code["a8"] == "held"
    assert [(r.job_id, r.placement) for r in plan.reservations] == [("a8", (("n0", 8),))]


def test_never_place_on_draining_or_down_nodes():
    ns = (NodeState("d", "H100", 8, health=DRAINING), NodeState("x", "H100", 8, health="down"),
          NodeState("ok", "H100", 2))
    s = snap(ns, flat_teams({"a": 1}), pending=[pend("a0", "lab/a", 1), pend("a1", "lab/a", 4)])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert starts(plan)["a0"].placement == (("ok", 1),)
    assert "a1" in plan.waiting


def test_nested_teams_take_from_the_sibling_subtree_above_its_share():
    """x and y share lab/a; y is above its share inside a: x takes from y, not from lab/b who is at its share."""
    teams = (TeamState("lab", None, 2), TeamState("lab/a", "lab", 1), TeamState("lab/b", "lab", 1),
             TeamState("lab/a/x", "lab/a", 0.5), TeamState("lab/a/y", "lab/a", 0.5))
    running = full_node_of("lab/a/y", "n0", n=8, prefix="y") + full_node_of("lab/b", "n1", n=8, prefix="b")
    s = snap(nodes(2), teams, running, [pend("x0", "lab/a/x", submit=NOW - HOUR)] +
             [pend(f"b{i}", "lab/b", submit=NOW - HOUR) for i in range(3)] +
             [pend(f"y{i}x", "lab/a/y", submit=NOW - HOUR) for i in range(3)])
    plan = policy.plan(s)
    check_plan(s, plan)
    pre = preempts(plan)
    assert len(pre) == 1 and next(iter(pre)).startswith("y")


def test_work_beyond_a_teams_guaranteed_share_starts_as_borrowed():
    """a and b share 16 GPUs equally (8 each). b asks for one 16-GPU gang, more than its share, so it cannot use
    its 8 now; a's first 8 jobs are its guaranteed share (protected by its contract), the 4 more run on the GPUs b
    leaves idle as borrowed work: no protected time, reclaimable at once."""
    s = snap(nodes(2), flat_teams({"a": 1, "b": 1}), [],
             [pend(f"a{i:02d}", "lab/a", submit=NOW - HOUR + i) for i in range(12)]
             + [pend("gang", "lab/b", 16, submit=NOW - 2 * HOUR, gpus_per_node=8)])
    plan = policy.plan(s)
    check_plan(s, plan)
    st = starts(plan)
    assert sorted(st) == [f"a{i:02d}" for i in range(12)]
    assert sorted(j for j, a in st.items() if a.scavenger) == [f"a{i:02d}" for i in range(8, 12)]
    alone = snap(nodes(2), flat_teams({"a": 1, "b": 1}), [],
                 [pend(f"a{i:02d}", "lab/a", submit=NOW - HOUR + i) for i in range(12)])
    st2 = starts(policy.plan(alone))
    # alone, a is entitled to all it asks, but only its nominal share (8 of 16) is guaranteed: b may come back
    assert len(st2) == 12
    assert sorted(j for j, a in st2.items() if a.scavenger) == [f"a{i:02d}" for i in range(8, 12)]


def test_a_job_mostly_within_its_teams_share_starts_protected_a_job_mostly_beyond_it_borrowed():
    """a's guaranteed part is 8 of 16 GPUs and it runs 6. A 4-GPU job (2 within, 2 beyond) is a's own and starts
    protected; a 6-GPU job (2 within, 4 beyond) would be borrowed work."""
    running = [run(f"r{i}", "lab/a", [("n0", 1)]) for i in range(6)]
    gang = snap(nodes(2), flat_teams({"a": 1, "b": 1}), running,
                [pend("four", "lab/a", 4, submit=NOW - HOUR), pend("bgang", "lab/b", 16, gpus_per_node=8)])
    assert not starts(policy.plan(gang))["four"].scavenger
    big = snap(nodes(2), flat_teams({"a": 1, "b": 1}), running,
               [pend("six", "lab/a", 6, submit=NOW - HOUR), pend("bgang", "lab/b", 16, gpus_per_node=8)])
    assert starts(policy.plan(big))["six"].scavenger


def test_borrowed_work_is_reclaimed_without_waiting_for_protected_time():
    """a borrowed 4 GPUs beyond its share (started as scavenger 10 minutes ago); b arrives and is owed them:
    the borrowed jobs are preempted at once, though a standard contract would protect them for 2 h."""
    running = full_node_of("lab/a", n=8, prefix="p")
    running += [run(f"borrow{i}", "lab/a", [("n1", 1)], started=NOW - 600, scavenger=True) for i in range(4)]
    running += [run(f"x{i}", "lab/c", [("n1", 1)], started=NOW - 600) for i in range(4)]
    s = snap(nodes(2), flat_teams({"a": 1, "b": 1, "c": 1}), running,
             [pend("b0", "lab/b", submit=NOW - HOUR)])
    plan = policy.plan(s)
    check_plan(s, plan)
    victims = set(preempts(plan))
    assert len(victims) == 1 and victims <= {f"borrow{i}" for i in range(4)}


def _hold_start(a_running: int):
    """a runs ``a_running`` 1-GPU jobs on n0; 2 GPUs of n1 are held for its job ``ah`` (its victims are gone);
    b and c have spent their budgets, so a is entitled to all it wants, but its nominal share is 16/3 GPUs."""
    running = [run(f"a{i}", "lab/a", [("n0", 1)]) for i in range(a_running)]
    running += [run(f"b{i}", "lab/b", [("n1", 1)]) for i in range(6)]
    s = snap(nodes(2), flat_teams({"a": 1, "b": 1, "c": 1}, spent=("b", "c")), running,
             [pend("ah", "lab/a", 2, submit=NOW - HOUR)],
             reservations=[Reservation("ah", (("n1", 2),), NOW + 600, "hold", NOW - 60)])
    plan = policy.plan(s)
    check_plan(s, plan)
    return starts(plan)["ah"]


def test_a_job_started_on_a_hold_beyond_its_teams_nominal_share_is_borrowed_work():
    """a preempted its way up while b and c were spent: 10 GPUs against a nominal share of 5.3. Its job starts
    without protected time, so that when b or c get budget again they need not wait out a 2 h (or 24 h)
    protection for GPUs a only borrowed."""
    assert _hold_start(8).scavenger


def test_a_job_started_on_a_hold_within_its_teams_nominal_share_is_protected():
    """4 + 2 GPUs: within the nominal share plus half the job (a claim may reach that far): protected."""
    assert not _hold_start(4).scavenger


def test_borrowed_work_within_its_teams_share_is_not_taken():
    """c's job was started as borrowed when c was above its share; now c holds less than it is entitled to, so
    b (also owed) must not take it: preemption never pushes a team below its share."""
    running = full_node_of("lab/a", n=8, prefix="p")
    running += [run("cjob", "lab/c", [("n1", 1)], started=NOW - 600, scavenger=True)]
    running += [run(f"a{i}", "lab/a", [("n1", 1)], started=NOW - 5 * HOUR) for i in range(7)]
    s = snap(nodes(2), flat_teams({"a": 1, "b": 1, "c": 1}), running,
             [pend("b0", "lab/b", submit=NOW - HOUR), pend("c1", "lab/c", submit=NOW - HOUR)])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert "cjob" not in preempts(plan)


def test_a_gang_preempts_on_the_nodes_of_its_own_reservation():
    """b's 16-GPU gang holds n0 and n1 (a reservation from the last cycle): 12 of the 16 GPUs are free, the last
    4 belong to a's job x, past its protection and beyond a's share. The gang preempts x there, rather than
    keeping 12 GPUs idle until x ends by itself."""
    running = [run("x", "lab/a", [("n1", 4)], started=NOW - 5 * HOUR),
               run("y", "lab/a", [("n2", 8)], started=NOW - 5 * HOUR)]
    gang = pend("gang", "lab/b", 16, submit=NOW - 2 * HOUR, gpus_per_node=8)
    held = Reservation("gang", (("n0", 8), ("n1", 8)), NOW + HOUR, "gang", NOW - 600)
    s = snap(nodes(3), flat_teams({"a": 1, "b": 3}), running, [gang, pend("a9", "lab/a", 4, submit=NOW - HOUR)],
             reservations=[held])
    plan = policy.plan(s)
    check_plan(s, plan)
    pre = preempts(plan)
    assert set(pre) == {"x"} and pre["x"].for_job == "gang"
    assert "a9" not in starts(plan)  # the held GPUs are not given away meanwhile


def test_a_team_running_nothing_may_preempt_for_a_job_larger_than_its_share():
    """c is owed 2 GPUs (a 1/8 share of 16) but its only job is an 8-GPU gang: not even half of it falls within
    its share. Running nothing, it may still claim its first job, here from the work of b, whose budget is
    spent; without this rule c would never run at all."""
    running = [run(f"b{i}", "lab/b", [("n0", 1)], started=NOW - 5 * HOUR) for i in range(8)]
    running += [run(f"a{i}", "lab/a", [("n1", 1)], started=NOW - 5 * HOUR) for i in range(8)]
    teams = flat_teams({"a": 7, "b": 1, "c": 1}, spent=("b",))
    s = snap(nodes(2), teams, running,
             [pend("c8", "lab/c", 8, submit=NOW - HOUR, gpus_per_node=8)] + [pend("a9", "lab/a", 8, submit=NOW - HOUR)])
    plan = policy.plan(s)
    check_plan(s, plan)
    pre = preempts(plan)
    assert set(pre) == {f"b{i}" for i in range(8)} and all(p.for_job == "c8" for p in pre.values())


def test_a_lumpy_surplus_is_taken_when_the_trade_is_a_clear_gain():
    """Surplus comes in job-sized lumps. a and b split 24 GPUs equally (12 each): a runs two 8-GPU jobs (4 above
    its share), b runs 8 and is owed 4 for its 8-GPU job. Taking one of a's jobs would leave a 4 below its share
    to give b 4: no gain, no preemption. With shares 9:7 of 32 GPUs, a runs 24 against 18 and b 8 against 14:
    taking one of a's 8-GPU jobs leaves a 2 short and gives b 6, a clear gain, and it happens."""
    running = [run("a1", "lab/a", [("n0", 8)]), run("a2", "lab/a", [("n1", 8)]), run("b1", "lab/b", [("n2", 8)])]
    s = snap(nodes(3), flat_teams({"a": 1, "b": 1}), running, [pend("b2", "lab/b", 8, submit=NOW - HOUR)])
    assert not preempts(policy.plan(s))
    running = [run("a1", "lab/a", [("n0", 8)]), run("a2", "lab/a", [("n1", 8)]),
               run("a3", "lab/a", [("n3", 8)]), run("b1", "lab/b", [("n2", 8)])]
    s = snap(nodes(4), flat_teams({"a": 9, "b": 7}), running,
             [pend("b2", "lab/b", 8, submit=NOW - HOUR), pend("a4", "lab/a", 8, submit=NOW - HOUR)])
    plan = policy.plan(s)
    check_plan(s, plan)
    pre = preempts(plan)
    assert len(pre) == 1 and set(pre) <= {"a1", "a2", "a3"} and next(iter(pre.values())).for_job == "b2"


def test_a_borrowed_lump_goes_when_the_gpus_it_frees_serve_other_teams_below_their_shares():
    """On 16 GPUs, a (share 1 of 16) runs an 8-GPU job as borrowed work and is entitled to about 1 GPU; b (7) runs
    5 and waits for 1 more; c (8) runs 3 and waits for 6. Taking a's job leaves a 1 below its share for 1 GPU to
    the requester: no gain by itself. But the 7 other GPUs it frees go to the teams below their shares (b +1,
    c +6), and a's job goes. With c wanting nothing more, a is entitled to the 7 GPUs nobody else wants and its job
    stays."""
    running = ([run("a1", "lab/a", [("n0", 8)], scavenger=True)] + full_node_of("lab/b", "n1", n=5)
               + full_node_of("lab/c", "n1", n=3, prefix="c"))
    teams = flat_teams({"a": 1, "b": 7, "c": 8})
    waiting_b = [pend("b9", "lab/b", 1)]
    waiting_c = [pend(f"c9{i}", "lab/c", 1) for i in range(6)]
    s = snap(nodes(2), teams, running, waiting_b + waiting_c)
    plan = policy.plan(s)
    check_plan(s, plan)
    assert set(preempts(plan)) == {"a1"}
    s = snap(nodes(2), teams, running, waiting_b)
    assert not preempts(policy.plan(s))


def _lump_and_two_owed_teams(c_waiting: int, borrowed: bool = True):
    """16 GPUs: a runs an 8-GPU job on n0 (as borrowed work unless not ``borrowed``); on n1 b runs 4 and waits for
    a 2-GPU job (owed just it: entitled 6), and c, with much recent usage (so the Fair Tree serves b first), runs 4
    and waits with ``c_waiting`` 1-GPU jobs. a is entitled to what is left."""
    teams = (TeamState("lab", None, 8), TeamState("lab/a", "lab", 1), TeamState("lab/b", "lab", 3),
             TeamState("lab/c", "lab", 4, usage_gpu_s=1e9))
    running = ([run("a1", "lab/a", [("n0", 8)], scavenger=borrowed)] + full_node_of("lab/b", "n1", n=4)
               + full_node_of("lab/c", "n1", n=4, prefix="c"))
    pending = [pend("b9", "lab/b", 2)] + [pend(f"c9{i}", "lab/c", 1) for i in range(c_waiting)]
    s = snap(nodes(2), teams, running, pending)
    plan = policy.plan(s)
    check_plan(s, plan)
    return plan


def test_a_lump_mostly_above_its_teams_share_counts_what_it_frees_for_other_teams():
    """With c waiting for 4 (owed 4), a is entitled to 2 and its lump lies 6 above that, three quarters of it: the
    6 GPUs it frees beyond b's job count as gain up to what c is owed (2 + 4 against a loss of 2), and it goes for
    b's job, the first served. With c waiting for 3 (owed 3), a is entitled to 3 and lies only 5 above it: what it
    frees counts for b's own team alone (owed nothing beyond the job: a gain of 2 against a loss of 3), and c, owed
    2 beyond its first job, gains 3 against 3: the lump stays. Work a started as its own (it was owed then) has
    its share's guarantee: what it frees beyond the job is not counted, and it stays too."""
    assert {k: p.for_job for k, p in preempts(_lump_and_two_owed_teams(4)).items()} == {"a1": "b9"}
    assert not preempts(_lump_and_two_owed_teams(3))
    assert not preempts(_lump_and_two_owed_teams(4, borrowed=False))


def test_a_plan_taking_two_jobs_of_one_team_counts_that_teams_loss_below_its_share_once():
    """On 24 GPUs b (entitled 12) runs 8 and waits for a 4-GPU job; a runs four 2-GPU jobs, 1 above its share of 7;
    c's jobs are protected. Taking two of a's jobs leaves a 3 below its share (1 after the first, 2 more after the
    second) for a gain of 4 to b: a clear gain, and they go. Entitled to 7.5, a would lose 3.5: they stay."""
    def plan_for(grant_a: float):
        teams = (TeamState("lab", None, 24), TeamState("lab/a", "lab", grant_a), TeamState("lab/b", "lab", 12),
                 TeamState("lab/c", "lab", 12 - grant_a))
        running = ([run(f"a{i}", "lab/a", [("n0", 2)]) for i in range(4)] + full_node_of("lab/b", "n1")
                   + full_node_of("lab/c", "n2", prefix="c", started=NOW - 600))
        s = snap(nodes(3), teams, running, [pend("b4", "lab/b", 4)])
        plan = policy.plan(s)
        check_plan(s, plan)
        return plan

    assert {k: p.for_job for k, p in preempts(plan_for(7)).items()} == {"a0": "b4", "a1": "b4"}
    assert not preempts(plan_for(7.5))


def _b_waits_beside_borrowed_work(grant_a: float, a_jobs: tuple[int, ...], b_runs: int, b_waits: tuple[int, int]):
    """16 GPUs: a's borrowed jobs (of ``a_jobs`` GPUs each) on n0, c's protected jobs filling n0 and n1 beside b's
    ``b_runs`` 1-GPU jobs; b (entitled 8) waits for two jobs of ``b_waits`` GPUs, in that order."""
    running = [run(f"a{i}", "lab/a", [("n0", g)], scavenger=True) for i, g in enumerate(a_jobs)]
    running += full_node_of("lab/c", "n0", n=8 - sum(a_jobs), prefix="c", started=NOW - 600)
    running += full_node_of("lab/b", "n1", n=b_runs)
    running += full_node_of("lab/c", "n1", n=8 - b_runs, prefix="d", started=NOW - 600)
    first, then = b_waits
    s = snap(nodes(2), flat_teams({"a": grant_a, "b": 8, "c": 8 - grant_a}), running,
             [pend("b-first", "lab/b", first, submit=NOW - HOUR), pend("b-then", "lab/b", then, submit=NOW - HOUR + 1)])
    plan = policy.plan(s)
    check_plan(s, plan)
    return plan


def test_a_borrowed_job_that_frees_just_what_the_job_needs_counts_no_gpus_for_the_teams_next_jobs():
    """b runs 2 and waits for a 4-GPU job, then a 2-GPU one. a's borrowed 4-GPU job frees just the 4 GPUs b's first
    job needs, none for its next: at a's share of 4, taking it leaves a 4 below for a gain of 4, and it stays; at a
    share of 3 the loss is 3, and it goes."""
    assert not preempts(_b_waits_beside_borrowed_work(4, (4,), 2, (4, 2)))
    plan = _b_waits_beside_borrowed_work(3, (4,), 2, (4, 2))
    assert {k: p.for_job for k, p in preempts(plan).items()} == {"a0": "b-first"}


def test_the_gpu_two_borrowed_victims_free_beyond_the_job_counts_for_the_requesters_next_job():
    """b runs 4 and waits for a 3-GPU job, then a 1-GPU one. a's two borrowed 2-GPU jobs on n0 both go for the
    first: they free one GPU beyond it, which b's next job takes. At a's share of 3 that is a gain of 4 against a
    loss of 3, and they go; at a share of 3.5 they stay."""
    plan = _b_waits_beside_borrowed_work(3, (2, 2), 4, (3, 1))
    assert {k: p.for_job for k, p in preempts(plan).items()} == {"a0": "b-first", "a1": "b-first"}
    assert not preempts(_b_waits_beside_borrowed_work(3.5, (2, 2), 4, (3, 1)))


def test_a_second_victim_of_one_team_is_a_lump_only_by_what_its_team_keeps_above_its_share():
    """On 24 GPUs a runs four borrowed 2-GPU jobs, 1.5 above its share of 6.5; b (entitled 8) runs 5 and waits for
    a 3-GPU job, first served; c, owed 1, waits behind it; d's jobs are protected. b's job would take two of a's:
    the first lies three quarters above a's share, but once it goes a is below its share, so the GPU the second
    frees beyond b's job counts for no other team: a gain of 3 against a loss of 2.5 is not clear, and b's job
    waits. c's job takes one of a's jobs instead (a gain of 1 and a's spill against a loss of 0.5)."""
    teams = (TeamState("lab", None, 24), TeamState("lab/a", "lab", 6.5), TeamState("lab/b", "lab", 8),
             TeamState("lab/c", "lab", 4, usage_gpu_s=1e9), TeamState("lab/d", "lab", 5.5))
    running = ([run(f"a{i}", "lab/a", [("n0", 2)], scavenger=True) for i in range(4)]
               + full_node_of("lab/b", "n1", n=5) + full_node_of("lab/c", "n1", n=3, prefix="c", started=NOW - 600)
               + full_node_of("lab/d", "n2", prefix="d", started=NOW - 600))
    s = snap(nodes(3), teams, running, [pend("b3", "lab/b", 3, submit=NOW - HOUR), pend("c9", "lab/c", 1)])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert {k: p.for_job for k, p in preempts(plan).items()} == {"a0": "c9"}


def _two_groups(grant_b: float = 1) -> tuple[TeamState, ...]:
    return (TeamState("lab", None, 1 + grant_b), TeamState("lab/a", "lab", 1), TeamState("lab/b", "lab", grant_b),
            TeamState("lab/a/a1", "lab/a", 1), TeamState("lab/a/a2", "lab/a", 1),
            TeamState("lab/b/b1", "lab/b", 1), TeamState("lab/b/b2", "lab/b", 1))


def test_a_team_below_its_share_takes_from_a_team_above_its_own_even_when_that_teams_group_is_below():
    """Entitlements: groups 8 each; b1 and b2 4 each, a1 3 (what it asks for), a2 5. b1 runs 6 (2 above its
    share) while its group runs 7 (b2 cannot use more yet: its whole-node job does not fit). a1 runs 2 of its 3;
    a2's work is protected. a1 takes one of b1's jobs: the shares are the teams', and a group's entitlement is the
    sum of its teams'."""
    running = ([run(f"a1-{i}", "lab/a/a1", [("n0", 1)]) for i in range(2)]
               + [run(f"a2-{i}", "lab/a/a2", [("n0", 1)], started=NOW - 60) for i in range(6)]
               + [run("a2-6", "lab/a/a2", [("n1", 1)], started=NOW - 60)]
               + [run(f"b1-{i}", "lab/b/b1", [("n1", 1)]) for i in range(6)]
               + [run("b2-0", "lab/b/b2", [("n1", 1)])])
    pending = [pend("a1-new", "lab/a/a1", 1, submit=NOW - HOUR),
               pend("b2-gang", "lab/b/b2", 8, gpus_per_node=8, submit=NOW - HOUR)]
    s = snap(nodes(2), _two_groups(), running, pending)
    plan = policy.plan(s)
    check_plan(s, plan)
    pre = preempts(plan)
    assert len(pre) == 1 and next(iter(pre)).startswith("b1-") and next(iter(pre.values())).for_job == "a1-new"


def test_the_walk_serves_a_team_below_its_share_before_a_group_below_its_share_as_a_whole():
    """Group a runs 7 of its 8 but its only team below its share (a1) has just a whole-node job that cannot start;
    a2 is above its share. b1, in group b (at its share as a whole), is below its own: the free GPU is b1's, not
    a loan to a2 that b1 would preempt ten minutes later."""
    running = ([run(f"a1-{i}", "lab/a/a1", [("n0", 1)]) for i in range(2)]
               + [run(f"a2-{i}", "lab/a/a2", [("n0", 1)]) for i in range(5)]
               + [run(f"b1-{i}", "lab/b/b1", [("n1", 1)]) for i in range(6)]
               + [run(f"b2-{i}", "lab/b/b2", [("n1", 1)]) for i in range(2)]
               + [run(f"b2-{i + 2}", "lab/b/b2", [("n2", 1)]) for i in range(8)])
    pending = [pend("a1-gang", "lab/a/a1", 8, gpus_per_node=8, submit=NOW - 60),
               pend("a2-next", "lab/a/a2", 1, submit=NOW - 120),
               pend("b1-next", "lab/b/b1", 1, submit=NOW - 60)]
    s = snap(nodes(3), _two_groups(grant_b=2), running, pending)
    plan = policy.plan(s)
    check_plan(s, plan)
    assert set(starts(plan)) == {"b1-next"}


def test_a_surplus_made_by_a_debug_session_goes_back_as_jobs_end_not_by_preemption():
    """a runs its share of batch work (4 of 8) plus a 2-GPU debug session; b, below its share, has waited 5 h.
    The session's surplus lasts as long as the session: b gets the next GPUs that free up, and none of a's jobs
    is stopped for it. Had a run the same 6 GPUs as batch work, one would yield to b at once."""
    waiting_b = [pend("b0", "lab/b", submit=NOW - 5 * HOUR)]
    b_runs = full_node_of("lab/b", n=2, prefix="s")
    with_session = full_node_of("lab/a", n=4) + [run("dbg", "lab/a", [("n0", 2)], contract="debug",
                                                     started=NOW - 1800)]
    s = snap(nodes(1), flat_teams({"a": 1, "b": 1}), with_session + b_runs, waiting_b)
    plan = policy.plan(s)
    check_plan(s, plan)
    assert not preempts(plan) and not starts(plan)
    assert "below its fair share" in plan.waiting["b0"]

    all_batch = full_node_of("lab/a", n=6) + b_runs
    s = snap(nodes(1), flat_teams({"a": 1, "b": 1}), all_batch, waiting_b)
    plan = policy.plan(s)
    check_plan(s, plan)
    assert [p.for_job for p in preempts(plan).values()] == ["b0"]


def test_a_team_whose_only_running_work_is_a_debug_session_may_claim_a_job_larger_than_its_share():
    """b (a quarter of the budget: 4 of 16 GPUs) runs only a 1-GPU debug session; its first batch job needs a whole
    node. A team running no batch work may claim its first job whatever its size; the session does not count as one.
    The spent team c's scavengers on n1 make way for it."""
    teams = (TeamState("lab", None, 5), TeamState("lab/a", "lab", 3), TeamState("lab/b", "lab", 1),
             TeamState("lab/c", "lab", 1, remaining_gpu_hours=0))
    running = (full_node_of("lab/a", n=7) + [run("dbg", "lab/b", [("n0", 1)], contract="debug", started=NOW - 600)]
               + full_node_of("lab/c", node="n1", prefix="c", contract="scavenger", scavenger=True))
    pending = [pend("b0", "lab/b", 8, submit=NOW - 5 * HOUR)] + [pend(f"a{i}", "lab/a", submit=NOW - 60)
                                                                  for i in range(10)]
    s = snap(nodes(2), teams, running, pending)
    plan = policy.plan(s)
    check_plan(s, plan)
    pre = preempts(plan)
    assert sorted(pre) == [f"c{i}" for i in range(8)] and {p.for_job for p in pre.values()} == {"b0"}


def _slack_claim(a_runs: int, **cfg):
    """64 GPUs, four equal teams (nominal share 16 each); c and d want one GPU each, so a and b are entitled to 31.
    b runs 62 - ``a_runs`` (all past protection), a runs ``a_runs`` and its next job has waited an hour."""
    slots = iter([f"n{i}" for i in range(8) for _ in range(8)])  # one GPU each, node by node
    running = [run(f"{team}{i}", f"lab/{team}", [(next(slots), 1)])
               for team, n in (("a", a_runs), ("b", 62 - a_runs), ("c", 1), ("d", 1)) for i in range(n)]
    s = snap(nodes(8), flat_teams({"a": 1, "b": 1, "c": 1, "d": 1}), running,
             [pend("a-next", "lab/a", submit=NOW - HOUR)]
             + [pend(f"a-later{i}", "lab/a", submit=NOW - 60) for i in range(8)], **cfg)
    plan = policy.plan(s)
    check_plan(s, plan)
    return plan


def test_a_team_beyond_its_nominal_share_claims_slack_only_in_sizeable_steps():
    """a (30 of its 31 entitled GPUs, 14 beyond its nominal share of 16) is owed one GPU, under 5% of its
    entitlement: that part of its share exists only while c and d want little, so a waits for a GPU to free up
    instead of stopping one of b's jobs. Owed five (26 of 31), it takes one from b, which stays above its share."""
    plan = _slack_claim(30)
    assert not preempts(plan)
    assert "nominal share" in plan.waiting["a-next"] and plan.waiting_code["a-next"] == "claim-band"
    without_band = preempts(_slack_claim(30, claim_band=0.0))  # without the band a takes one GPU from b at once
    assert [(p.job_id[0], p.for_job) for p in without_band.values()] == [("b", "a-next")]
    plan = _slack_claim(26)
    assert [(p.job_id[0], p.for_job) for p in preempts(plan).values()] == [("b", "a-next")]


def _blocked_type_head(**cfg):
    """b (nothing running) waits first for a B200 job, then for an H100 one. The B200 node holds c's jobs inside
    their protected time; the H100 node holds a's, past it, a above its share."""
    node_list = nodes(1) + nodes(1, gpu_type="B200", prefix="m")
    running = (full_node_of("lab/a")
               + full_node_of("lab/c", node="m0", prefix="c", started=NOW - 1800, gpu_type="B200"))
    s = snap(node_list, flat_teams({"a": 1, "b": 1, "c": 1}), running,
             [pend("b-b200", "lab/b", submit=NOW - 2 * HOUR, gpu_type="B200"),
              pend("b-h100", "lab/b", submit=NOW - HOUR, gpu_type="H100")], **cfg)
    plan = policy.plan(s)
    check_plan(s, plan)
    return plan


def test_a_job_blocked_on_one_gpu_type_does_not_hold_its_teams_claims_on_another():
    """No B200 GPU can be freed for b's first job (c's are protected); its next job, for H100, still takes one
    of a's, and its first job waits with its reason."""
    plan = _blocked_type_head()
    assert [(p.job_id[0], p.for_job) for p in preempts(plan).values()] == [("r", "b-h100")]
    assert "none can be freed" in plan.waiting["b-b200"] and "B200 nodes" in plan.waiting["b-b200"]


def _short_b(shortfall):
    """a holds all 8 GPUs of an equal share; b has waited 5 h for four 1-GPU jobs, with this shortfall history."""
    s = snap(nodes(1), flat_teams({"a": 1, "b": 1}), full_node_of("lab/a"),
             [pend(f"b{i}", "lab/b", submit=NOW - 5 * HOUR) for i in range(4)])
    return replace(s, shortfall=shortfall)


def test_a_team_short_of_its_share_preempts_only_once_it_went_without_a_gpu_hour():
    """Jobs ending elsewhere fill a short lump within minutes; a preemption waits until they have not. b is owed 4
    GPUs: after 10 min short (40 GPU-minutes) it still waits and says how much longer; after 15 min it preempts."""
    plan = policy.plan(_short_b(Shortfall(NOW, {})))  # b just fell short of its share
    assert not preempts(plan)
    assert plan.shortfall.teams == {"lab/b": (0.0, 4.0)}
    assert "once team lab/b has gone without 1.0 GPU-hours of its share (0.0 so far: about 15 min more at 4 GPUs " \
        "short)" in plan.waiting["b0"]
    assert plan.waiting_code["b0"] == "reclaim-wait"

    later = _short_b(Shortfall(NOW - 600, {"lab/b": (0.0, 4.0)}))  # 10 min short of 4 GPUs: 40 GPU-minutes
    plan = policy.plan(later)
    assert not preempts(plan)
    assert plan.shortfall.teams["lab/b"] == (4 * 600.0, 4.0)
    assert "(0.7 so far: about 5 min more at 4 GPUs short)" in plan.waiting["b0"]

    plan = policy.plan(_short_b(Shortfall(NOW - 900, {"lab/b": (0.0, 4.0)})))  # 15 min: a GPU-hour
    check_plan(later, plan)
    assert {p.for_job for p in preempts(plan).values()} == {"b0"}


def test_the_shortfall_starts_again_at_the_share_and_can_be_waived():
    """A team back at its share leaves the ledger (its next shortfall counts from zero); a snapshot without a
    ledger (a caller that keeps none) or a rule set to 0 preempts as soon as the job has waited."""
    even = snap(nodes(1), flat_teams({"a": 1, "b": 1}),
                full_node_of("lab/a", n=4) + full_node_of("lab/b", n=4, prefix="s"),
                [pend("b0", "lab/b", submit=NOW - 5 * HOUR)])
    plan = policy.plan(replace(even, shortfall=Shortfall(NOW - 600, {"lab/b": (9 * HOUR, 4.0)})))
    assert plan.shortfall == Shortfall(NOW, {})

    assert preempts(policy.plan(_short_b(None)))
    no_rule = _short_b(Shortfall(NOW, {}))
    no_rule = replace(no_rule, config=replace(no_rule.config, reclaim_after_gpu_s=0.0))
    assert preempts(policy.plan(no_rule))


def test_a_requeued_jobs_borrowed_run_is_safe_for_a_minimum_run_time_however_often_it_ran():
    """a holds n0: seven jobs inside their protected time, and one borrowed 8th GPU. b has waited 20 min and is
    owed a GPU. The borrowed job is taken at once on its first run; once it has been stopped before it is safe for
    10 minutes, so that it is not stopped again minutes after each restart, and for no longer after three earlier
    runs (borrowed work kept for an hour would hold GPUs that b is owed). b's job waits meanwhile, and its reason
    says why."""
    def cycle(runs: int, ran_for: float):
        borrowed = run("borrowed", "lab/a", [("n0", 1)], started=NOW - ran_for, scavenger=True, runs=runs)
        running = full_node_of("lab/a", n=7, started=NOW - 600) + [borrowed]
        s = snap(nodes(1), flat_teams({"a": 1, "b": 1}), running, [pend("b0", "lab/b", submit=NOW - 1200)])
        plan = policy.plan(s)
        check_plan(s, plan)
        return plan

    assert set(preempts(cycle(0, 60))) == {"borrowed"}
    assert not preempts(cycle(1, 9 * 60))
    assert set(preempts(cycle(1, 10 * 60))) == {"borrowed"}
    plan = cycle(3, 9 * 60)
    assert not preempts(plan) and "protected time" in plan.waiting["b0"]
    assert set(preempts(cycle(3, 10 * 60))) == {"borrowed"}


def test_a_session_takes_back_a_loan_of_the_debug_pool_however_often_the_job_ran_before():
    pool = NodeState("pool", "H100", 2, debug_pool=True)
    running = [run("loan", "lab/a", [("pool", 2)], started=NOW - 60, scavenger=True, runs=3)]
    s = snap([pool], flat_teams({"a": 1, "b": 1}), running, [pend("dbg", "lab/b", contract="debug", submit=NOW - 5)])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert preempts(plan)["loan"].for_job == "dbg"


def test_out_of_budget_work_is_taken_wherever_it_runs_when_no_node_can_be_freed_whole():
    """Late in a period lab/a alone is in budget: its own jobs hold 6 GPUs of every node and the spent lab/b's
    work the other 2. No node can be freed for lab/a's 6-GPU job (its own jobs are never its victims), so a job of
    free shape takes lab/b's work on every node and runs in the three 2-GPU chunks, as it would on free GPUs. A job
    that asked for 6 GPUs on one node cannot run that way and waits."""
    running = [run(f"a{i}", "lab/a", [(f"n{i}", 6)]) for i in range(3)]
    running += [run(f"b{i}", "lab/b", [(f"n{i}", 2)]) for i in range(3)]
    teams = flat_teams({"a": 1, "b": 1}, spent=("b",))
    s = snap(nodes(3), teams, running, [pend("big", "lab/a", 6)])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert set(preempts(plan)) == {"b0", "b1", "b2"} and {p.for_job for p in preempts(plan).values()} == {"big"}
    (hold,) = plan.reservations
    assert hold.kind == "hold" and hold.placement == (("n0", 2), ("n1", 2), ("n2", 2))
    after = snap(s.nodes, teams, running[:3], s.pending, plan.reservations, now=NOW + 120)
    assert dict(starts(policy.plan(after))["big"].placement) == {"n0": 2, "n1": 2, "n2": 2}
    shaped = snap(nodes(3), teams, running, [pend("big", "lab/a", 6, gpus_per_node=6)])
    plan = policy.plan(shaped)
    check_plan(shaped, plan)
    assert not preempts(plan) and "big" in plan.waiting



def _own_jobs_on_every_node(b_per_node: tuple[int, int, int]):
    """lab/a and lab/b share 24 GPUs equally (12 each); b's own jobs sit on all three nodes and a's fill the rest,
    so no node can ever be freed whole for b's 8-GPU jobs (a team's own work is never its victim). b waits for two
    8-GPU jobs and, behind them, a 2-GPU one."""
    running = [run(f"b{i}{k}", "lab/b", [(f"n{i}", 1)]) for i in range(3) for k in range(b_per_node[i])]
    running += [run(f"a{i}{k}", "lab/a", [(f"n{i}", 1)]) for i in range(3) for k in range(8 - b_per_node[i])]
    return snap(nodes(3), flat_teams({"a": 1, "b": 1}), running,
                [pend("b-big", "lab/b", 8), pend("b-big2", "lab/b", 8, submit=NOW - HOUR + 1),
                 pend("b-small", "lab/b", 2, submit=NOW - HOUR + 2)])


def test_a_failed_plan_for_a_job_beyond_what_its_team_is_owed_leaves_its_smaller_jobs_their_claims():
    """b holds 7 and is owed 5: its 8-GPU job may claim (more than half of it is owed) but finds no node. That says
    nothing of its 2-GPU job, which needs two GPUs of one node: it takes two of a's (5 above its share) in the same
    cycle. The other 8-GPU job, as large as the one that failed, tries no plan of its own."""
    s = _own_jobs_on_every_node((3, 2, 2))
    plan = policy.plan(s)
    check_plan(s, plan)
    pre = preempts(plan)
    assert len(pre) == 2 and {p.for_job for p in pre.values()} == {"b-small"}
    assert all(j.startswith("a") for j in pre)
    assert "or are its own team's" in plan.waiting["b-big"] and "b-big2" in plan.waiting


def test_a_job_its_team_is_owed_whole_keeps_the_teams_claims_when_its_plan_fails():
    """b holds 3 and is owed 9: its 8-GPU job is owed whole, so its smaller job does not claim ahead of it (it
    would fill the share the 8-GPU job waits for, and the team, at its share, would never claim for it again)."""
    s = _own_jobs_on_every_node((1, 1, 1))
    plan = policy.plan(s)
    check_plan(s, plan)
    assert not preempts(plan) and "b-small" in plan.waiting


def test_a_borrowed_lump_goes_when_the_requesters_own_team_is_owed_what_it_frees():
    """On 16 GPUs, a (share 3 of 16) runs an 8-GPU job as borrowed work, 5 above its share: not the three quarters
    of the lump that count its spill to other teams. c (13) runs 8 and waits with 1-GPU jobs, owed 5. Taking a's
    job leaves a 3 below its share for 1 GPU to c's first job, but the 7 others go to c's next jobs, 4 of them
    within c's share: a gain of 5 against a loss of 3, and a's job goes. With c waiting for one more job only, c is
    entitled to 9 and a to the 7 nobody else wants: a's job stays."""
    running = [run("a1", "lab/a", [("n0", 8)], scavenger=True)] + full_node_of("lab/c", "n1", n=8, prefix="c")
    s = snap(nodes(2), flat_teams({"a": 3, "c": 13}), running,
             [pend(f"c9{i}", "lab/c", 1, submit=NOW - HOUR) for i in range(8)])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert set(preempts(plan)) == {"a1"}
    s = snap(nodes(2), flat_teams({"a": 3, "c": 13}), running, [pend("c90", "lab/c", 1, submit=NOW - HOUR)])
    assert not preempts(policy.plan(s))


def test_a_plan_stops_no_job_it_does_not_need():
    """b is owed 8 GPUs and its 4-GPU job waits; n0 holds c's jobs past their protected time: two of 1 GPU with
    little work since they started, and one of 6. The cheapest first (work lost) are the small ones, but the 6-GPU
    job must go anyway, and once it does they free nothing b needs: only it is stopped."""
    running = [run("c1", "lab/c", [("n0", 1)], started=NOW - 2 * HOUR),
               run("c1-old", "lab/c", [("n0", 1)], started=NOW - 10 * HOUR),
               run("c6", "lab/c", [("n0", 6)], started=NOW - 2 * HOUR),
               run("c8", "lab/c", [("n1", 8)], started=NOW - 600)]
    s = snap(nodes(2), flat_teams({"b": 1, "c": 1}), running,
             [pend("b4", "lab/b", 4, submit=NOW - HOUR), pend("b4-next", "lab/b", 4, submit=NOW - HOUR + 1)])
    plan = policy.plan(s)
    check_plan(s, plan)
    assert set(preempts(plan)) == {"c6"} and preempts(plan)["c6"].for_job == "b4"


def test_a_session_takes_the_job_that_stops_soonest():
    """x and y, well above their shares, each run jobs past their protected time on a node of their own: x with the
    standard contract's 10 minutes of grace, y with the short contract's minute. a's session takes one of y's: it
    starts in a minute, not ten."""
    running = [run(f"x{i}", "lab/x", [("n0", 1)]) for i in range(3)]
    running += [run(f"y{i}", "lab/y", [("n1", 1)], contract="short") for i in range(3)]
    running += [run(f"a-on-n{i}", "lab/a", [(f"n{i}", 1)], started=NOW - 60) for i in range(2)]
    s = snap(nodes(2, gpus=4), flat_teams({"a": 4, "x": 1, "y": 1}), running,
             [pend("a-debug", "lab/a", 1, contract="debug", submit=NOW - 10), pend("a-more", "lab/a", 4)])
    plan = policy.plan(s)
    check_plan(s, plan)
    (victim,) = preempts(plan)
    assert victim.startswith("y") and preempts(plan)[victim].grace_s == 60


@pytest.mark.parametrize("started_as_scavenger", [True, False])
def test_out_of_budget_work_goes_before_in_budget_work(started_as_scavenger):
    """s's budget is spent and its jobs fill n0 beside a's, started as scavenger work or before its budget ran out;
    x, well above its share, fills n1 with jobs past their protected time and a shorter grace. Both a's session and
    a's batch job take s's jobs: out-of-budget work goes first, whatever it started as (DESIGN §4.2)."""
    running = [run(f"s{i}", "lab/s", [("n0", 1)], scavenger=started_as_scavenger) for i in range(3)]
    running += [run(f"x{i}", "lab/x", [("n1", 1)], contract="short") for i in range(3)]
    running += [run(f"a-on-n{i}", "lab/a", [(f"n{i}", 1)], started=NOW - 60) for i in range(2)]
    for job in (pend("a-debug", "lab/a", 1, contract="debug", submit=NOW - 10), pend("a1", "lab/a", 1)):
        s = snap(nodes(2, gpus=4), flat_teams({"a": 4, "s": 1, "x": 1}, spent=("s",)), running,
                 [job, pend("a-more", "lab/a", 4, submit=NOW - 30)])
        plan = policy.plan(s)
        check_plan(s, plan)
        (victim,) = preempts(plan)
        assert victim.startswith("s"), job.id
