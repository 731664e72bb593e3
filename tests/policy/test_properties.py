"""Property tests over random small snapshots: the rules that never bend, determinism, and two-cycle holds."""

import dataclasses
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.policy.policy_builders import (
    CONTRACTS,
    HOUR,
    NOW,
    check_plan,
    plan_with_nodes_freeing_first_in_full,
    preempts,
    starts,
)

from scheduling.policy import (
    DRAINING,
    HEALTHY,
    BudgetPolicy,
    NodeState,
    PendingJob,
    PolicyConfig,
    Release,
    Reservation,
    RunningJob,
    Shortfall,
    Snapshot,
    Start,
    TeamState,
)

policy = BudgetPolicy()
CONTRACT_NAMES = [c.name for c in CONTRACTS]
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def chunks(rnd: random.Random, gpus: int, p: float) -> list[int]:
    """Random job sizes filling part of a node of ``gpus`` GPUs (one more job with probability ``p``)."""
    out = []
    while gpus > 0 and rnd.random() < p:
        out.append(rnd.randint(1, gpus))
        gpus -= out[-1]
    return out


@st.composite
def snapshots(draw):
    rnd = random.Random(draw(st.integers(0, 2**32 - 1)))
    n_nodes = draw(st.integers(1, 5))
    nodes = []
    for i in range(n_nodes):
        health = rnd.choices([HEALTHY, DRAINING, "down"], [8, 1, 1])[0]
        nodes.append(NodeState(f"n{i}", rnd.choice(["H100", "B200"]), rnd.choice([1, 2, 4, 8]), health=health,
                               debug_pool=rnd.random() < 0.2))
    team_ids = ["lab/a", "lab/b", "lab/c", "lab/a/x"][: draw(st.integers(1, 4))]
    teams = [TeamState("lab", None, 10, remaining_gpu_hours=rnd.choice([float("inf")] * 9 + [0.0]))]
    for t in team_ids:
        parent = t.rsplit("/", 1)[0]
        teams.append(TeamState(t, parent, rnd.choice([0, 1, 2, 3]), usage_gpu_s=rnd.uniform(0, 1e5),
                               remaining_gpu_hours=rnd.choice([float("inf"), 10.0, 10.0, 0.0])))
    job_teams = team_ids + ["lab"]
    running = []
    for nd in nodes:
        for k in chunks(rnd, nd.gpus, 0.8):
            contract = rnd.choice(CONTRACT_NAMES)
            started = NOW - rnd.uniform(0, 10 * HOUR)
            running.append(RunningJob(
                f"r{len(running)}", rnd.choice(job_teams), k, contract, ((nd.id, k),), started_s=started,
                submit_s=started - 10, gpu_type=nd.gpu_type, scavenger=contract == "scavenger" or rnd.random() < 0.1,
                preempting=rnd.random() < 0.1, last_checkpoint_s=rnd.choice([None, started + 1]),
                idle_since_s=rnd.choice([None, None, NOW - rnd.uniform(0, 3 * HOUR)]),
                time_limit_s=rnd.choice([None, None, rnd.uniform(NOW - started, NOW - started + 2 * HOUR)]),
                runs=rnd.choice([0, 0, 1, 2, 4]), rank=rnd.choice([0, 0, 1, -1])))
    pending = []
    for i in range(draw(st.integers(0, 12))):
        gpus = rnd.choice([1, 1, 2, 3, 4, 8, 16])
        gpn = rnd.choice([None, None, min(gpus, 8)]) if gpus >= 2 else None
        # (a few have waited a day or more: turns of starved jobs of one node, §7)
        pending.append(PendingJob(
            f"p{i}", rnd.choice(job_teams), gpus, rnd.choice(CONTRACT_NAMES),
            submit_s=NOW - rnd.choice([rnd.uniform(0, 2 * HOUR)] * 3 + [rnd.uniform(20 * HOUR, 30 * HOUR)]),
            gpu_type=rnd.choice([None, "H100", "B200"]), rank=rnd.choice([0, 0, 1, -1]), gpus_per_node=gpn,
            time_limit_s=rnd.choice([None, None, rnd.uniform(60, 2 * HOUR)])))
    reservations = []
    for j in pending:
        if rnd.random() < 0.2:
            nd = rnd.choice(nodes)
            reservations.append(Reservation(j.id, ((nd.id, j.gpus),), NOW + rnd.uniform(-60, 3600),
                                            rnd.choice(["hold", "gang", "turn-wait", "turn", "turn-hold"]),
                                            NOW - 60))
    # how long teams have been short of their shares (leaves: a team with child teams has its own-work leaf)
    leaves = [t + "/" for t in ("lab", "lab/a")] + team_ids
    shortfall = rnd.choice([None, Shortfall(NOW - rnd.uniform(0, 3600), {
        # (GPU-seconds gone without: sometimes enough to pay for a turn)
        leaf: (rnd.choice([0.0, rnd.uniform(0, 2 * HOUR), rnd.uniform(0, 100 * HOUR)]), rnd.uniform(0, 4))
        for leaf in leaves
        if rnd.random() < 0.5})])
    return Snapshot(NOW, tuple(nodes), tuple(teams), CONTRACTS, tuple(running), tuple(pending),
                    tuple(reservations),
                    PolicyConfig(preempt_after_s=rnd.choice([0.0, 600.0]), guaranteed_first=rnd.random() < 0.5),
                    shortfall=shortfall)


@SETTINGS
@given(snapshots())
def test_rules_never_bend(s):
    check_plan(s, policy.plan(s))


@SETTINGS
@given(snapshots(), st.randoms(use_true_random=False))
def test_same_snapshot_same_plan_whatever_the_order(s, rnd):
    plan = policy.plan(s)
    assert policy.plan(s) == plan
    shuffled = Snapshot(s.now_s, tuple(rnd.sample(s.nodes, len(s.nodes))), tuple(rnd.sample(s.teams, len(s.teams))),
                        tuple(rnd.sample(s.contracts, len(s.contracts))), tuple(rnd.sample(s.running, len(s.running))),
                        tuple(rnd.sample(s.pending, len(s.pending))),
                        tuple(rnd.sample(s.reservations, len(s.reservations))), s.config, shortfall=s.shortfall)
    assert policy.plan(shuffled) == plan


def grouped(s: Snapshot) -> Snapshot:
    """The same snapshot with ``pending_by_team``, as the simulator hands it over."""
    by_team: dict[str, list] = {}
    for j in sorted(s.pending, key=lambda j: (j.rank, j.submit_s, j.id)):
        by_team.setdefault(j.team, []).append(j)
    return dataclasses.replace(s, pending_by_team={t: tuple(q) for t, q in by_team.items()})


@SETTINGS
@given(snapshots())
def test_pending_grouped_by_the_caller_gives_the_same_plan(s):
    g = grouped(s)
    plan = BudgetPolicy().plan(s)
    cached = BudgetPolicy()
    assert cached.plan(g) == plan
    assert cached.plan(g) == plan  # the second time from the queue cache
    assert cached.plan(grouped(s)) == plan  # new tuples with the same jobs: derived again


@SETTINGS
@given(snapshots(), snapshots())
def test_the_quota_borrowing_baseline_plans_the_same_from_the_callers_groups(earlier, s):
    """The quota-borrowing baseline keeps each team's FIFO list while the caller hands over the same tuple; from the
    simulator's groups, fresh or kept, its plan is the one it makes from the flat queue (in queue order)."""
    from scheduling.simulation.baselines import QuotaBorrowing

    flat = dataclasses.replace(s, pending=tuple(sorted(s.pending, key=lambda j: (j.rank, j.submit_s, j.id))))
    plan = QuotaBorrowing().plan(flat)
    used = QuotaBorrowing()
    used.plan(grouped(earlier))
    g = grouped(s)
    assert used.plan(g) == plan
    assert used.plan(g) == plan  # the second time from what it kept


@SETTINGS
@given(snapshots(), snapshots())
def test_what_a_policy_keeps_from_an_earlier_snapshot_never_changes_a_plan(earlier, s):
    """A policy keeps the share tree's shape and the queues' derived data from cycle to cycle; a snapshot of other
    teams, grants or queues before must leave the plan as a fresh policy makes it."""
    used = BudgetPolicy()
    used.plan(grouped(earlier))
    assert used.plan(grouped(s)) == BudgetPolicy().plan(grouped(s))


def next_cycle(s: Snapshot, plan, dt: float = 60.0) -> Snapshot:
    """Apply a plan the way a caller would, letting every preempted job finish its grace."""
    gone = {a.job_id for a in plan.actions if not isinstance(a, Start) and hasattr(a, "grace_s")}
    gone |= {a.job_id for a in plan.actions if isinstance(a, Release)}
    gone |= {r.id for r in s.running if r.preempting}
    pend = {j.id: j for j in s.pending}
    running = [r for r in s.running if r.id not in gone]
    for a in plan.actions:
        if isinstance(a, Start):
            j = pend.pop(a.job_id)
            running.append(RunningJob(j.id, j.team, j.gpus, j.contract, a.placement, s.now_s, j.submit_s,
                                      gpu_type=next(n.gpu_type for n in s.nodes if n.id == a.placement[0][0]),
                                      scavenger=a.scavenger))
    return Snapshot(s.now_s + dt, s.nodes, s.teams, s.contracts, tuple(running), tuple(pend.values()),
                    plan.reservations, s.config, shortfall=plan.shortfall)


@SETTINGS
@given(snapshots())
def test_gpus_freed_by_preemption_start_the_job_they_were_freed_for(s):
    plan = policy.plan(s)
    holds = {p.for_job for p in preempts(plan).values() if p.reason != "drain"}
    s2 = next_cycle(s, plan)
    plan2 = policy.plan(s2)
    check_plan(s2, plan2)
    assert holds <= set(starts(plan2)), "a preemption did not let its job start once the victims were gone"
    s3 = next_cycle(s2, plan2)
    check_plan(s3, policy.plan(s3))


@SETTINGS
@given(snapshots())
def test_skipping_nodes_without_a_first_victim_changes_no_plan(s):
    """The preemption planner skips nodes where a plan that has freed nothing could take no victim; trying every
    node must give the same plan (the skip is only a shortcut)."""
    from scheduling.policy import preemption

    plan = policy.plan(s)
    orig = preemption.Preemptor._promising
    preemption.Preemptor._promising = lambda self, *a: set(self.index.cap)
    try:
        assert BudgetPolicy().plan(s) == plan
    finally:
        preemption.Preemptor._promising = orig


@SETTINGS
@given(snapshots())
def test_the_walk_passing_over_jobs_that_can_do_nothing_changes_no_plan(s):
    """The walk goes straight to a team's next job that fits or that its team may claim for; serving every job of
    the queue one by one must give the same plan (the skip is only a shortcut)."""
    from scheduling.policy import budget

    plan = policy.plan(s)
    orig = budget._Cycle._next_to_serve
    budget._Cycle._next_to_serve = lambda self, tq, at_most, i, *a: i
    try:
        assert BudgetPolicy().plan(s) == plan
    finally:
        budget._Cycle._next_to_serve = orig


@SETTINGS
@given(snapshots())
def test_gang_reservations_reading_only_the_nodes_they_need_change_no_plan(s):
    """A blocked gang's look for the nodes that free first reads a node's running jobs only when it needs that
    node's time (the nodes missing the fewest GPUs, ends gathered once per cycle); reading every job and every
    node each time must give the same plan (the shortcut changes nothing)."""
    assert plan_with_nodes_freeing_first_in_full(s) == policy.plan(s)


def _leaf(s: Snapshot, team: str) -> str:
    return team + "/" if any(t.parent == team for t in s.teams) else team


@SETTINGS
@given(snapshots())
def test_a_team_preempts_for_batch_work_only_after_going_without_its_share_long_enough(s):
    """The shortfall the plan hands back holds exactly the teams owed a GPU; a batch preemption is made only for a
    team that has gone without ``reclaim_after_gpu_s`` of its share (unless the caller keeps no shortfall)."""
    plan = policy.plan(s)
    assert plan.shortfall is not None and plan.shortfall.as_of_s == s.now_s
    assert all(gone >= 0 and short >= 0.5 for gone, short in plan.shortfall.teams.values())
    if s.shortfall is None:
        return
    team_of = {j.id: j.team for j in s.pending}
    for p in preempts(plan).values():
        if p.reason == "fair-share":
            gone = plan.shortfall.teams[_leaf(s, team_of[p.for_job])][0]
            assert gone >= s.config.reclaim_after_gpu_s


@st.composite
def alone_in_budget(draw):
    """lab/a alone in budget among spent teams, its own jobs and theirs scattered over nodes of one type, and one
    job of lab/a of free shape waiting: what a cluster looks like late in a period."""
    rnd = random.Random(draw(st.integers(0, 2**32 - 1)))
    nodes = tuple(NodeState(f"n{i}", "H100", 8) for i in range(draw(st.integers(1, 6))))
    teams = (TeamState("lab", None, 30), TeamState("lab/a", "lab", 10),
             TeamState("lab/b", "lab", 10, remaining_gpu_hours=0.0),
             TeamState("lab/c", "lab", 10, remaining_gpu_hours=0.0))
    running = []
    for nd in nodes:
        for k in chunks(rnd, nd.gpus, 0.85):
            started = NOW - rnd.uniform(0, 10 * HOUR)
            running.append(RunningJob(f"r{len(running)}", rnd.choice(["lab/a", "lab/b", "lab/c"]), k,
                                      rnd.choice(["standard", "long"]), ((nd.id, k),), started_s=started,
                                      submit_s=started - 10, gpu_type="H100"))
    job = PendingJob("want", "lab/a", rnd.randint(1, 16), "standard", submit_s=NOW - HOUR)
    return Snapshot(NOW, nodes, teams, CONTRACTS, tuple(running), (job,), (),
                    PolicyConfig(claim_band=0.0, gang_turns=False))


@SETTINGS
@given(alone_in_budget())
def test_a_team_alone_in_budget_never_waits_while_out_of_budget_work_holds_the_gpus_it_needs(s):
    """Out-of-budget work is every team's first victim: wherever it runs, a job of free shape that it and the free
    GPUs could hold starts, or its GPUs are freed for it, and only out-of-budget work is taken."""
    plan = policy.plan(s)
    check_plan(s, plan)
    (job,) = s.pending
    spent_gpus = sum(r.gpus for r in s.running if r.team != "lab/a")
    free = sum(n.gpus for n in s.nodes) - sum(r.gpus for r in s.running)
    taken = preempts(plan)
    assert all(next(r for r in s.running if r.id == v).team != "lab/a" for v in taken)
    if free + spent_gpus >= job.gpus:
        assert "want" in starts(plan) or {p.for_job for p in taken.values()} == {"want"}
    else:
        assert not taken
