"""The baselines' rules one at a time: gang shapes and GPU types, EASY backfill's held GPUs and shadow time, the
reservation's nodes, static priority's victims and waits, and the quotas' arithmetic. Stories written for what
mutation testing showed no test held: a baseline that breaks its own rules flatters the policy it is measured
against."""

from __future__ import annotations

from scheduling.policy.types import NodeState, Reservation, TeamState
from scheduling.simulation.baselines import FifoBackfill, QuotaBorrowing, StaticPriority, nominal_quotas
from tests.simulation.test_baselines import pend, preempted, run, snap, starts

NOW = 100_000.0
HOUR = 3600.0
THREE = tuple(NodeState(f"n{i}", "H100", 8) for i in range(3))
TYPED = (NodeState("n0", "H100", 8), NodeState("n1", "B200", 8))


# ---- FIFO with EASY backfill ----------------------------------------------------------------------------------


def test_fifo_keeps_a_gangs_shape_when_it_starts_and_when_it_backfills():
    """n0 and n1 have 3 free GPUs each: a gang of two 3-GPU replicas starts across them, though no node holds all
    6. Then the head (a whole node) reserves n2, the node with the most free GPUs, and a gang of two 2-GPU
    replicas backfills on the 2 + 2 GPUs left free beside it."""
    plan = FifoBackfill().plan(snap([run("r0", "lab/a", [("n0", 5)]), run("r1", "lab/a", [("n1", 5)])],
                                    [pend("gang", "lab/b", 6, 10, gpus_per_node=3)], nodes=THREE))
    assert starts(plan) == {"gang": (("n0", 3), ("n1", 3))}
    running = [run("r0", "lab/a", [("n0", 6)]), run("r1", "lab/a", [("n1", 6)]), run("r2", "lab/a", [("n2", 5)])]
    plan = FifoBackfill().plan(snap(running, [pend("head", "lab/a", 8, 10), pend("gang", "lab/b", 4, 20,
                                                                                gpus_per_node=2)], nodes=THREE))
    assert plan.reservations[0].placement == (("n2", 8),)
    assert starts(plan) == {"gang": (("n0", 2), ("n1", 2))}


def test_fifo_reserves_nodes_of_the_heads_gpu_type_and_skips_jobs_that_never_fit():
    """A 16-GPU B200 job can never run on the one B200 node (the two H100 nodes would hold it): it is passed over,
    not made the head; so is a gang of three 5-GPU replicas, which no three nodes of one type hold. The 8-GPU B200
    job behind them reserves the B200 node although the H100 nodes have more free GPUs, and an H100 job starts; a
    B200 job of 1 GPU, with none free of its type, waits without ending the walk."""
    nodes = (NodeState("n0", "H100", 8), NodeState("n1", "H100", 8), NodeState("n2", "B200", 8))
    running = [run("h8", "lab/a", [("n0", 8)]), run("b4", "lab/a", [("n2", 4)], gpu_type="B200")]
    pending = [pend("huge", "lab/a", 16, 5, gpu_type="B200"), pend("gang", "lab/a", 15, 6, gpus_per_node=5),
               pend("b8", "lab/a", 8, 10, gpu_type="B200"), pend("b1", "lab/b", 1, 15, gpu_type="B200"),
               pend("h1", "lab/b", 1, 20, gpu_type="H100")]
    plan = FifoBackfill().plan(snap(running, pending, nodes=nodes))
    assert [(r.job_id, r.placement) for r in plan.reservations] == [("b8", (("n2", 8),))]
    assert starts(plan) == {"h1": (("n1", 1),)}


def test_fifo_walks_on_past_a_type_with_no_free_gpus_to_the_last_free_gpu():
    """The H100 node is full: the H100 head reserves it and the next H100 job waits, but the B200 job behind them
    takes the one free B200 GPU."""
    running = [run("h8", "lab/a", [("n0", 8)]), run("b7", "lab/a", [("n1", 7)], gpu_type="B200")]
    pending = [pend("head", "lab/a", 8, 10, gpu_type="H100"), pend("h2", "lab/a", 2, 20, gpu_type="H100"),
               pend("b1", "lab/b", 1, 30, gpu_type="B200")]
    plan = FifoBackfill().plan(snap(running, pending, nodes=TYPED))
    assert starts(plan) == {"b1": (("n1", 1),)}


def test_fifo_with_no_free_gpu_keeps_its_reservation_as_it_was_and_starts_a_job_on_the_last_free_one():
    running = [run("r0", "lab/a", [("n0", 8)]), run("r1", "lab/b", [("n1", 8)])]
    prev = (Reservation("head", (("n0", 8),), NOW + 60),)
    plan = FifoBackfill().plan(snap(running, [pend("head", "lab/a", 8, 10)], prev))
    assert plan.reservations == prev and not plan.actions
    assert FifoBackfill().plan(snap(running, (), prev)).reservations == ()
    plan = FifoBackfill().plan(snap([running[0], run("r1", "lab/b", [("n1", 7)])], [pend("one", "lab/b", 1, 10)]))
    assert starts(plan) == {"one": (("n1", 1),)}


def test_fifo_reservations_last_their_time_to_live_and_a_gang_reserves_its_replicas_nodes():
    """A gang of three 4-GPU replicas reserves 4 GPUs on each of three nodes (the most free first), not two whole
    nodes; the reservation runs out after the configured time to live, also when it is the last cycle's kept."""
    running = [run("r0", "lab/a", [("n0", 6)]), run("r1", "lab/a", [("n1", 5)]), run("r2", "lab/a", [("n2", 7)])]
    pending = [pend("gang", "lab/b", 12, 10, gpus_per_node=4)]
    s = snap(running, pending, nodes=THREE)
    (res,) = FifoBackfill().plan(s).reservations
    assert (res.job_id, res.placement) == ("gang", (("n0", 4), ("n1", 4), ("n2", 4)))
    assert res.expires_s == NOW + s.config.reservation_ttl_s
    (kept,) = FifoBackfill().plan(snap(running, pending, (res,), now=NOW + 30, nodes=THREE)).reservations
    ttl = s.config.reservation_ttl_s
    assert (kept.job_id, kept.placement, kept.expires_s) == ("gang", res.placement, NOW + 30 + ttl)


def test_fifo_gang_reservation_passes_over_nodes_smaller_than_a_replica():
    """Two whole-node replicas on a cluster whose first nodes (by free GPUs) hold only 4 GPUs: the reservation
    takes the two 8-GPU nodes."""
    nodes = (NodeState("a0", "H100", 4), NodeState("n0", "H100", 8), NodeState("n1", "H100", 8))
    running = [run("r0", "lab/a", [("n0", 5)]), run("r1", "lab/a", [("n1", 6)])]
    plan = FifoBackfill().plan(snap(running, [pend("gang", "lab/b", 16, 10, gpus_per_node=8)], nodes=nodes))
    assert plan.reservations[0].placement == (("n0", 8), ("n1", 8))


def test_fifo_reserves_one_big_enough_node_for_a_job_of_one_node_and_every_gpu_of_a_larger_one():
    """An 8-GPU job reserves the 8-GPU node with the most free GPUs, not the 4-GPU node that has more free; a job of
    17 GPUs reserves two whole nodes and one GPU of a third."""
    nodes = (NodeState("a0", "H100", 4),) + THREE
    running = [run("r0", "lab/a", [("n0", 5)]), run("r1", "lab/a", [("n1", 6)]), run("r2", "lab/a", [("n2", 7)])]
    plan = FifoBackfill().plan(snap(running, [pend("head", "lab/b", 8, 10)], nodes=nodes))
    assert plan.reservations[0].placement == (("n0", 8),)
    plan = FifoBackfill().plan(snap(running[1:], [pend("head", "lab/b", 17, 10)], nodes=THREE))
    assert plan.reservations[0].placement == (("n0", 8), ("n1", 8), ("n2", 1))


def _held_twelve(*backfill):
    """The head (12 GPUs, any shape) reserves n1 (6 free) whole and 4 of n0's 5 free; r1 on n1 and r0 on n0 end by
    their limits in 2 hours (the shadow time)."""
    running = [run("r0", "lab/a", [("n0", 3)], started=NOW - HOUR, limit=3 * HOUR),
               run("r1", "lab/a", [("n1", 2)], started=NOW - HOUR, limit=3 * HOUR), run("r2", "lab/a", [("n2", 8)])]
    return FifoBackfill().plan(snap(running, [pend("head", "lab/a", 12, 10), *backfill], nodes=THREE))


def test_fifo_backfill_uses_free_and_held_gpus_together_and_counts_what_it_took():
    """n0's last free GPU and the 4 held beside it take a 5-GPU job limited to an hour (best fit: not n1's 6
    held); a 4-GPU job takes 4 of n1's held GPUs; a 3-GPU job then finds 2 held GPUs on n1 and none on n0."""
    plan = _held_twelve(pend("five", "lab/b", 5, 20, limit=HOUR), pend("four", "lab/b", 4, 30, limit=HOUR),
                        pend("three", "lab/b", 3, 40, limit=HOUR))
    assert plan.reservations[0].placement == (("n0", 4), ("n1", 8))
    assert starts(plan) == {"five": (("n0", 5),), "four": (("n1", 4),)}
    # a 3-GPU job takes n0's free GPU and 2 of its 4 held: the 2 held left there take the next 2-GPU job
    plan = _held_twelve(pend("three", "lab/b", 3, 20, limit=HOUR), pend("two", "lab/b", 2, 30, limit=HOUR))
    assert starts(plan) == {"three": (("n0", 3),), "two": (("n0", 2),)}
    # a gang of two 2-GPU replicas spreads over the held GPUs of both nodes
    plan = _held_twelve(pend("gang", "lab/b", 4, 20, limit=HOUR, gpus_per_node=2))
    assert starts(plan) == {"gang": (("n0", 2), ("n1", 2))}


def test_fifo_backfill_knows_a_jobs_run_limit_from_its_contract_and_lets_it_end_at_the_shadow_time():
    """A debug job (its contract stops it at 4 hours) may not use the held GPUs before a shadow 2 hours away; a
    job limited to exactly those 2 hours may. With a 5-hour shadow, the debug job may too."""
    plan = _held_twelve(pend("dbg", "lab/b", 2, 20, contract="debug"), pend("2h", "lab/b", 2, 30, limit=2 * HOUR))
    assert set(starts(plan)) == {"2h"}
    running = [run("r0", "lab/a", [("n0", 8)]), run("r1", "lab/b", [("n1", 2)], started=NOW, limit=5 * HOUR)]
    plan = FifoBackfill().plan(snap(running, [pend("head", "lab/a", 8, 10), pend("dbg", "lab/b", 2, 20,
                                                                                 contract="debug")]))
    assert plan.reservations[0].placement == (("n1", 8),) and set(starts(plan)) == {"dbg"}


def test_fifo_shadow_time_counts_a_running_jobs_contract_limit():
    """A debug session on the reserved node ends by its contract's 4 hours, 3 hours from now: a job limited to 2
    hours backfills on the held GPUs."""
    running = [run("r0", "lab/a", [("n0", 8)]), run("s1", "lab/b", [("n1", 2)], started=NOW - HOUR, contract="debug")]
    plan = FifoBackfill().plan(snap(running, [pend("head", "lab/a", 8, 10), pend("2h", "lab/b", 2, 20,
                                                                                 limit=2 * HOUR)]))
    assert plan.reservations[0].placement == (("n1", 8),) and set(starts(plan)) == {"2h"}


def test_fifo_shadow_time_of_a_node_whose_job_is_being_preempted_is_its_deadline():
    """r1 on the reserved node has no time limit but is being preempted, gone within 10 minutes: a job limited to
    5 minutes backfills on the held GPUs."""
    running = [run("r0", "lab/a", [("n0", 8)]),
               run("r1", "lab/b", [("n1", 4)], preempting=True, preempt_deadline_s=NOW + 600)]
    plan = FifoBackfill().plan(snap(running, [pend("head", "lab/a", 8, 10), pend("5m", "lab/b", 4, 20, limit=300)]))
    assert starts(plan) == {"5m": (("n1", 4),)}


# ---- static priority ------------------------------------------------------------------------------------------


def test_static_priority_serves_high_before_an_earlier_low_job_and_walks_to_the_last_free_gpu():
    prio = {"lo": "low"}
    plan = StaticPriority(prio).plan(snap([run("r", "lab/a", [("n0", 8)])],
                                          [pend("lo", "lab/b", 8, 5), pend("hi", "lab/a", 8, 10)]))
    assert starts(plan) == {"hi": (("n1", 8),)}
    plan = StaticPriority().plan(snap([run("r", "lab/a", [("n0", 8), ("n1", 7)])],
                                      [pend("two", "lab/a", 2, 5), pend("one", "lab/b", 1, 10)]))
    assert starts(plan) == {"one": (("n1", 1),)}


def test_static_priority_takes_as_many_low_jobs_as_the_high_job_needs():
    prio = {"low-a": "low", "low-b": "low"}
    running = [run("h8", "lab/a", [("n0", 8)]), run("low-a", "lab/b", [("n1", 4)], started=10.0),
               run("low-b", "lab/b", [("n1", 4)], started=20.0)]
    plan = StaticPriority(prio, preempt=True).plan(snap(running, [pend("hi", "lab/a", 8, 30)]))
    assert preempted(plan) == [("low-b", 600, "priority", "hi"), ("low-a", 600, "priority", "hi")]


def test_static_priority_preempts_for_a_job_of_a_gpu_type_and_a_gang_on_what_fits_them():
    """A HIGH B200 job neither waits for the H100 GPUs in their grace nor takes the newer LOW job on the H100 node:
    it takes the LOW job on the B200 node. A HIGH gang of two 4-GPU replicas takes a LOW job on each node."""
    prio = {"going": "low", "low-h": "low", "low-b": "low", "low4a": "low", "low4b": "low"}
    running = [run("going", "lab/b", [("n0", 4)], preempting=True, preempt_deadline_s=NOW + 60),
               run("low-h", "lab/b", [("n0", 4)], started=20.0),
               run("low-b", "lab/b", [("n1", 8)], started=10.0, gpu_type="B200")]
    plan = StaticPriority(prio, preempt=True).plan(snap(running, [pend("hi", "lab/a", 8, 30, gpu_type="B200")],
                                                        nodes=TYPED))
    assert preempted(plan) == [("low-b", 600, "priority", "hi")]
    running = [run("h4a", "lab/a", [("n0", 4)]), run("low4a", "lab/b", [("n0", 4)], started=10.0),
               run("h4b", "lab/a", [("n1", 4)]), run("low4b", "lab/b", [("n1", 4)], started=20.0)]
    plan = StaticPriority(prio, preempt=True).plan(snap(running, [pend("gang", "lab/a", 8, 30, gpus_per_node=4)]))
    assert preempted(plan) == [("low4b", 600, "priority", "gang"), ("low4a", 600, "priority", "gang")]


def test_static_priority_keeps_a_gangs_shape():
    running = [run("r0", "lab/a", [("n0", 5)]), run("r1", "lab/a", [("n1", 5)])]
    plan = StaticPriority().plan(snap(running, [pend("gang", "lab/b", 6, 10, gpus_per_node=3)]))
    assert starts(plan) == {"gang": (("n0", 3), ("n1", 3))}


def test_static_priority_preempts_the_newest_low_job_past_its_protection_with_its_contracts_grace():
    """Both LOW jobs are past their protected 2 hours (one exactly): the newest goes, with the standard grace."""
    prio = {"old": "low", "new": "low"}
    running = [run("old", "lab/b", [("n0", 8)], started=0.0), run("new", "lab/b", [("n1", 8)], started=NOW - 2 * HOUR)]
    plan = StaticPriority(prio, preempt=True).plan(snap(running, [pend("hi", "lab/a", 8, 10)]))
    assert preempted(plan) == [("new", 600, "priority", "hi")]


def test_static_priority_counts_the_free_gpus_beside_a_low_victim_and_waits_for_gpus_in_their_grace():
    """A HIGH job of 8 GPUs takes n0's 2 free GPUs and its 6-GPU LOW job (n1's job is HIGH). With a LOW job on n1
    already being preempted, the HIGH job waits for its GPUs instead of stopping another job. A LOW job never
    preempts."""
    prio = {"low6": "low", "low8": "low", "lo": "low"}
    running = [run("low6", "lab/b", [("n0", 6)]), run("high8", "lab/b", [("n1", 8)])]
    plan = StaticPriority(prio, preempt=True).plan(snap(running, [pend("hi", "lab/a", 8, 10)]))
    assert preempted(plan) == [("low6", 600, "priority", "hi")]
    running[1] = run("low8", "lab/b", [("n1", 8)], preempting=True, preempt_deadline_s=NOW + 300)
    assert not preempted(StaticPriority(prio, preempt=True).plan(snap(running, [pend("hi", "lab/a", 8, 10)])))
    plan = StaticPriority(prio, preempt=True).plan(snap([running[0], run("high8", "lab/b", [("n1", 8)])],
                                                        [pend("lo", "lab/a", 8, 10)]))
    assert not preempted(plan) and not starts(plan)


def test_static_priority_counts_gpus_in_their_grace_with_its_victims():
    """n1 holds a LOW job being preempted (4 GPUs, gone within 5 minutes) and a LOW job past its protection (4):
    the GPUs in their grace are not enough alone, so the HIGH job takes the other LOW job too. A HIGH job too large
    for any plan does not stop the walk: the next HIGH job preempts, and the one after it still starts on the free
    GPU."""
    prio = {"going": "low", "low4": "low"}
    running = [run("h7", "lab/a", [("n0", 7)]), run("going", "lab/b", [("n1", 4)], preempting=True,
                                                     preempt_deadline_s=NOW + 300), run("low4", "lab/b", [("n1", 4)])]
    pending = [pend("huge", "lab/a", 16, 5), pend("hi", "lab/a", 8, 10), pend("one", "lab/a", 1, 20)]
    plan = StaticPriority(prio, preempt=True).plan(snap(running, pending))
    assert preempted(plan) == [("low4", 600, "priority", "hi")] and starts(plan) == {"one": (("n0", 1),)}


def test_static_priority_a_job_waiting_for_gpus_in_their_grace_lets_the_next_job_start():
    prio = {"going": "low"}
    running = [run("h7", "lab/a", [("n0", 7)]),
               run("going", "lab/b", [("n1", 8)], preempting=True, preempt_deadline_s=NOW + 300)]
    plan = StaticPriority(prio, preempt=True).plan(snap(running, [pend("hi", "lab/a", 8, 10),
                                                                  pend("one", "lab/a", 1, 20)]))
    assert not preempted(plan) and starts(plan) == {"one": (("n0", 1),)}


# ---- quota with borrowing --------------------------------------------------------------------------------------


def test_quotas_give_a_parents_unsplit_grant_to_the_parent_and_split_unset_grants_evenly():
    teams = (TeamState("lab", None, 100), TeamState("lab/a", "lab", 60), TeamState("lab/a/x", "lab/a", 30),
             TeamState("lab/b", "lab", 40))
    # shares of 16 GPUs: a's own 4.8, x 4.8, b 6.4; the two GPUs left go to the largest remainders (a and x)
    assert nominal_quotas(snap(teams=teams)) == {"lab/a": 5, "lab/a/x": 5, "lab/b": 6}
    teams = (TeamState("lab", None, 0), TeamState("lab/a", "lab", 0), TeamState("lab/b", "lab", 0))
    assert nominal_quotas(snap(teams=teams)) == {"lab/a": 8, "lab/b": 8}
    teams = (TeamState("lab", None, 100), TeamState("lab/a", "lab", 100), TeamState("lab/a/x", "lab/a", 50),
             TeamState("lab/a/y", "lab/a", 50))
    assert nominal_quotas(snap(teams=teams, nodes=THREE)) == {"lab/a/x": 12, "lab/a/y": 12}


def test_quota_jobs_inside_a_quota_start_before_earlier_jobs_that_would_borrow():
    """b (quota 4) runs nothing; a (quota 12) runs 12. Only 4 GPUs are free: a's earlier job would borrow them,
    but b's job fills b's quota exactly and starts first."""
    running = [run("a0", "lab/a", [("n0", 8)]), run("a1", "lab/a", [("n1", 4)])]
    plan = QuotaBorrowing().plan(snap(running, [pend("a2", "lab/a", 4, 5), pend("b4", "lab/b", 4, 10)]))
    assert starts(plan) == {"b4": (("n1", 4),)}


def test_quota_inside_pass_takes_a_teams_jobs_in_order_while_they_fit_its_room():
    """b's room is 4: its 3-GPU job fits, its next 2-GPU job would not, its 1-GPU job does. a's borrowing job
    comes first in submit order but only after the jobs inside quotas."""
    running = [run("a0", "lab/a", [("n0", 8)]), run("a1", "lab/a", [("n1", 4)])]
    pending = [pend("a-borrow", "lab/a", 1, 1), pend("b3", "lab/b", 3, 10), pend("b2", "lab/b", 2, 11),
               pend("b1", "lab/b", 1, 12)]
    plan = QuotaBorrowing().plan(snap(running, pending))
    assert set(starts(plan)) == {"b3", "b1"}


def test_quota_reclaim_takes_only_the_surplus_of_teams_above_their_quotas_newest_first():
    """c (quota 4) waits for 4 GPUs; a (quota 6) runs 9, 3 above its quota; b (quota 6) runs its quota. Pruned to
    a's surplus, the victims are a's two newest jobs (2 GPUs on n1, 2 on n0): no node frees 4 GPUs for c, so
    nothing is stopped, not even b's job, the newest on n1. With a's newest job on 4 GPUs of n1, it alone goes."""
    teams = (TeamState("lab", None, 16), TeamState("lab/a", "lab", 6), TeamState("lab/b", "lab", 6),
             TeamState("lab/c", "lab", 4))
    running = [run("a-old", "lab/a", [("n0", 5)], started=0.0), run("a-mid", "lab/a", [("n0", 2)], started=10.0),
               run("a-new", "lab/a", [("n1", 2)], started=20.0), run("b", "lab/b", [("n1", 6)], started=30.0)]
    plan = QuotaBorrowing().plan(snap(running, [pend("c4", "lab/c", 4, 40)], teams=teams))
    assert nominal_quotas(snap(teams=teams)) == {"lab/a": 6, "lab/b": 6, "lab/c": 4}
    assert preempted(plan) == []
    running[2] = run("a-new", "lab/a", [("n1", 4)], started=20.0)
    running[3] = run("b", "lab/b", [("n1", 4)], started=30.0)
    plan = QuotaBorrowing().plan(snap(running, [pend("c4", "lab/c", 4, 40)], teams=teams))
    assert preempted(plan) == [("a-new", 600, "reclaim", "c4")]


def test_quota_a_team_reclaims_only_for_a_job_inside_its_quota_and_waits_for_gpus_in_their_grace():
    running = [run("a-old", "lab/a", [("n0", 8)], started=0.0), run("a-new1", "lab/a", [("n1", 4)], started=50.0),
               run("a-new2", "lab/a", [("n1", 4)], started=60.0)]
    assert not preempted(QuotaBorrowing().plan(snap(running, [pend("b5", "lab/b", 5, 100)])))  # quota 4
    running[2] = run("a-new2", "lab/a", [("n1", 4)], started=60.0, preempting=True, preempt_deadline_s=NOW + 60)
    assert not preempted(QuotaBorrowing().plan(snap(running, [pend("b4", "lab/b", 4, 100)])))


def test_quotas_split_fractional_grants_by_share_and_give_the_gpus_left_to_the_largest_remainders():
    teams = (TeamState("lab", None, 1), TeamState("lab/a", "lab", 0.75), TeamState("lab/b", "lab", 0.25))
    assert nominal_quotas(snap(teams=teams)) == {"lab/a": 12, "lab/b": 4}
    # exact shares of 16: a 6.30, b 4.85, c 4.85: the two GPUs left go to b and c
    teams = (TeamState("lab", None, 33), TeamState("lab/a", "lab", 13), TeamState("lab/b", "lab", 10),
             TeamState("lab/c", "lab", 10))
    assert nominal_quotas(snap(teams=teams)) == {"lab/a": 6, "lab/b": 5, "lab/c": 5}


def test_quota_borrows_the_last_free_gpu_past_a_job_too_large_for_the_free_gpus():
    running = [run("a0", "lab/a", [("n0", 8)]), run("a1", "lab/a", [("n1", 7)])]
    plan = QuotaBorrowing().plan(snap(running, [pend("a8", "lab/a", 8, 1), pend("a1", "lab/a", 1, 2)]))
    assert starts(plan) == {"a1": (("n1", 1),)}


def test_quota_keeps_a_gangs_shape():
    running = [run("a0", "lab/a", [("n0", 5)]), run("a1", "lab/a", [("n1", 5)])]
    plan = QuotaBorrowing().plan(snap(running, [pend("gang", "lab/b", 4, 10, gpus_per_node=2)]))
    assert starts(plan) == {"gang": (("n0", 2), ("n1", 2))}


def test_quota_room_is_what_the_quota_leaves_after_what_the_team_runs():
    """b (quota 4) runs 2: its 3-GPU job would borrow, so a's 2-GPU job inside a's quota starts first on the 4 free
    GPUs, and b's job no longer fits."""
    running = [run("a0", "lab/a", [("n0", 8)]), run("a1", "lab/a", [("n1", 2)]), run("b0", "lab/b", [("n1", 2)])]
    plan = QuotaBorrowing().plan(snap(running, [pend("b3", "lab/b", 3, 5), pend("a2", "lab/a", 2, 10)]))
    assert starts(plan) == {"a2": (("n1", 2),)}


def test_quota_takes_a_teams_jobs_in_submit_order_however_the_queue_is_handed_over():
    """b's room (4 free GPUs, its quota of 4) takes one of its two 4-GPU jobs: the earlier, whether the queue comes
    as one tuple out of order or grouped by team (with an empty group for a team with nothing waiting)."""
    running = [run("a0", "lab/a", [("n0", 8)]), run("a1", "lab/a", [("n1", 4)])]
    late, early = pend("late", "lab/b", 4, 20), pend("early", "lab/b", 4, 10)
    assert starts(QuotaBorrowing().plan(snap(running, [late, early]))) == {"early": (("n1", 4),)}
    s = snap(running, [early, late])
    s = s.__class__(**{**{f: getattr(s, f) for f in s.__dataclass_fields__},
                       "pending_by_team": {"lab/a": (), "lab/b": (early, late)}})
    assert starts(QuotaBorrowing().plan(s)) == {"early": (("n1", 4),)}


def _four_teams(running, pending):
    teams = (TeamState("lab", None, 24), TeamState("lab/a", "lab", 10), TeamState("lab/b", "lab", 6),
             TeamState("lab/c", "lab", 4), TeamState("lab/d", "lab", 4))
    return QuotaBorrowing().plan(snap(running, pending, teams=teams, nodes=THREE))


def test_quota_a_team_that_filled_its_quota_this_cycle_reclaims_no_more():
    """On 24 GPUs c (quota 4) starts its first 4-GPU job on the 4 free GPUs; its next job is beyond its quota and
    reclaims nothing from a, 10 GPUs above its quota of 10."""
    running = [run("a0", "lab/a", [("n0", 8)]), run("a1", "lab/a", [("n1", 8)]), run("a2", "lab/a", [("n2", 4)])]
    plan = _four_teams(running, [pend("c4", "lab/c", 4, 10), pend("c4-2", "lab/c", 4, 20)])
    assert set(starts(plan)) == {"c4"} and not preempted(plan)


def test_quota_reclaim_stops_each_job_once_and_never_a_team_at_its_quota():
    """On 24 GPUs, all busy: a (quota 10) runs 18, b (quota 6) exactly its quota, its newest job on n2 beside a's
    newest. c and d (quota 4 each) wait for 4 GPUs: c's claim takes a's newest job (never b's), d's the next one."""
    running = [run("a-old", "lab/a", [("n0", 8)], started=0.0), run("a-mid", "lab/a", [("n1", 6)], started=10.0),
               run("a-new", "lab/a", [("n2", 4)], started=20.0), run("b-old", "lab/b", [("n1", 2)], started=5.0),
               run("b-new", "lab/b", [("n2", 4)], started=30.0)]
    waiting = [pend("a9", "lab/a", 1, 30), pend("c4", "lab/c", 4, 40), pend("d4", "lab/d", 4, 50)]
    plan = _four_teams(running, waiting)
    assert preempted(plan) == [("a-new", 600, "reclaim", "c4"), ("a-mid", 600, "reclaim", "d4")]
    # a-new already in its grace: c's job waits for its GPUs, and d's claim still takes a-mid
    running[2] = run("a-new", "lab/a", [("n2", 4)], started=20.0, preempting=True, preempt_deadline_s=NOW + 60)
    assert preempted(_four_teams(running, waiting)) == [("a-mid", 600, "reclaim", "d4")]
