"""The baselines behave like the systems they stand for, on hand-made snapshots."""

from __future__ import annotations

from scheduling.policy.types import NodeState, PendingJob, Preempt, Reservation, RunningJob, Snapshot, Start, TeamState
from scheduling.simulation.baselines import FifoBackfill, QuotaBorrowing, StaticPriority, nominal_quotas
from scheduling.simulation.model import DEFAULT_CONTRACTS

NODES = (NodeState("n0", "H100", 8), NodeState("n1", "H100", 8))
TEAMS = (TeamState("lab", None, 100), TeamState("lab/a", "lab", 75), TeamState("lab/b", "lab", 25))


def snap(running=(), pending=(), reservations=(), now=100_000.0, nodes=NODES, teams=TEAMS):
    return Snapshot(now_s=now, nodes=nodes, teams=teams, contracts=DEFAULT_CONTRACTS, running=tuple(running),
                    pending=tuple(pending), reservations=tuple(reservations))


def run(id, team, placement, started=0.0, contract="standard", limit=None, gpu_type="H100", **kw):
    return RunningJob(id=id, team=team, gpus=sum(g for _, g in placement), contract=contract,
                      placement=tuple(placement), started_s=started, submit_s=0.0, gpu_type=gpu_type,
                      time_limit_s=limit, **kw)


def pend(id, team, gpus, submit, contract="standard", limit=None, **kw):
    return PendingJob(id=id, team=team, gpus=gpus, contract=contract, submit_s=submit, time_limit_s=limit, **kw)


def starts(plan):
    return {a.job_id: a.placement for a in plan.actions if isinstance(a, Start)}


def preempted(plan):
    return [(a.job_id, a.grace_s, a.reason, a.for_job) for a in plan.actions if isinstance(a, Preempt)]


def test_fifo_starts_in_submit_order_and_packs():
    plan = FifoBackfill().plan(snap(running=[run("r", "lab/a", [("n1", 5)])],
                                    pending=[pend("late", "lab/a", 2, 20), pend("early", "lab/b", 3, 10)]))
    # best fit: the 3-GPU job goes to n1 (3 free) and keeps n0 whole; then the 2-GPU job on n0
    assert starts(plan) == {"early": (("n1", 3),), "late": (("n0", 2),)}


def test_fifo_head_gets_a_reservation_and_backfill_cannot_use_it():
    running = [run("r0", "lab/a", [("n0", 6)]), run("r1", "lab/b", [("n1", 4)])]
    pending = [pend("head", "lab/a", 8, 10), pend("small", "lab/b", 2, 20), pend("small2", "lab/b", 4, 30)]
    plan = FifoBackfill().plan(snap(running, pending))
    # head needs a whole node: it reserves n1 (most free); small jobs may only use n0's 2 free GPUs
    assert plan.reservations[0].job_id == "head" and plan.reservations[0].placement == (("n1", 8),)
    assert starts(plan) == {"small": (("n0", 2),)}
    # next cycle, r1 ended: n1 is free and held; the head starts there as soon as it fits
    plan2 = FifoBackfill().plan(snap([running[0]], pending[1:] + [pending[0]], plan.reservations))
    assert starts(plan2)["head"] == (("n1", 8),)


def test_fifo_backfills_held_gpus_with_jobs_whose_time_limit_ends_before_the_head_can_start():
    """EASY backfill: r1 on the head's node ends by its limit in 2 h (the shadow time). A job limited to 1 h
    may use the node's held GPUs; one limited to 3 h, or with no limit, may not."""
    now = 100_000.0
    running = [run("r0", "lab/a", [("n0", 8)], started=now - 600),
               run("r1", "lab/b", [("n1", 4)], started=now - 3600, limit=3 * 3600)]
    pending = [pend("head", "lab/a", 8, 10), pend("none", "lab/b", 2, 20), pend("3h", "lab/b", 2, 30, limit=3 * 3600),
               pend("1h", "lab/b", 2, 40, limit=3600)]
    plan = FifoBackfill().plan(snap(running, pending, now=now))
    assert plan.reservations[0].placement == (("n1", 8),)
    assert starts(plan) == {"1h": (("n1", 2),)}


def test_fifo_keeps_its_reserved_nodes_from_cycle_to_cycle():
    running = [run("r0", "lab/a", [("n0", 7)]), run("r1", "lab/b", [("n1", 1)])]
    prev = (Reservation("head", (("n0", 8),), 0.0),)
    plan = FifoBackfill().plan(snap(running, [pend("head", "lab/a", 8, 10), pend("s", "lab/b", 1, 20)], prev))
    assert plan.reservations[0].placement == (("n0", 8),)
    assert starts(plan) == {"s": (("n1", 1),)}  # not the GPU held on n0


def test_static_priority_high_first_and_preempts_low_only_past_protection():
    prio = {"lo": "low", "hi": "high", "old-low": "low", "new-low": "low"}
    running = [run("old-low", "lab/b", [("n0", 8)], started=0.0),
               run("new-low", "lab/b", [("n1", 8)], started=100_000.0 - 600)]
    pending = [pend("lo", "lab/b", 1, 5), pend("hi", "lab/a", 8, 10)]
    plan = StaticPriority(prio, preempt=True).plan(snap(running, pending))
    pre = [a for a in plan.actions if isinstance(a, Preempt)]
    # new-low is inside its 2 h protection: only old-low is preempted, with the standard grace
    assert [(a.job_id, a.grace_s, a.for_job) for a in pre] == [("old-low", 600, "hi")]
    # during the grace it does not preempt again
    running2 = [RunningJob(**{**{f: getattr(running[0], f) for f in running[0].__slots__}, "preempting": True}),
                running[1]]
    plan2 = StaticPriority(prio, preempt=True).plan(snap(running2, pending))
    assert not preempted(plan2)
    # without the flag it never preempts
    assert not StaticPriority(prio).plan(snap(running, pending)).actions


def test_static_priority_without_priorities_is_greedy_fifo():
    running = [run("r", "lab/a", [("n0", 8), ("n1", 6)])]
    plan = StaticPriority().plan(snap(running, [pend("big", "lab/a", 4, 1), pend("small", "lab/b", 1, 2)]))
    assert starts(plan) == {"small": (("n1", 1),)}  # the big head does not block anyone


def test_quotas_are_whole_gpus_by_budget_share():
    assert nominal_quotas(snap()) == {"lab/a": 12, "lab/b": 4}


def test_quota_borrowing_borrows_idle_quota_and_reclaims_it():
    # a runs 16 GPUs (borrowing 4 of b's); b submits 4 GPUs: a's newest job is preempted with its grace
    running = [run("a-old", "lab/a", [("n0", 8)], started=0.0), run("a-new1", "lab/a", [("n1", 4)], started=50.0),
               run("a-new2", "lab/a", [("n1", 4)], started=60.0)]
    plan = QuotaBorrowing().plan(snap(running, [pend("b1", "lab/b", 4, 100)]))
    assert preempted(plan) == [("a-new2", 600, "reclaim", "b1")]
    # a job of a over its quota borrows when GPUs are idle
    plan = QuotaBorrowing().plan(snap([run("a0", "lab/a", [("n0", 8)])], [pend("a1", "lab/a", 8, 1)]))
    assert starts(plan) == {"a1": (("n1", 8),)}
    # a team within its quota never preempts anyone
    plan = QuotaBorrowing().plan(snap(running[:2], [pend("a2", "lab/a", 8, 1)]))
    assert not preempted(plan)
