"""Stories about the walk's limits and its lead-order rules: how many preemption plans and gang reservations one
cycle makes (docs/policy.md §6-§8), and which of a team's jobs wait behind the gang its lead ranked first (§7)."""

from scheduling.policy import BudgetPolicy
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


def plan_of(s):
    plan = BudgetPolicy().plan(s)
    check_plan(s, plan)
    return plan


# ---- how much one cycle does ---------------------------------------------------------------------------------
def _blocked_gangs(n_nodes: int):
    """c fills every node with protected work that ends within the hour (its time limit); a and b, each owed more
    than a node, wait with a job of one whole node that no plan can start."""
    running = [run(f"c{i}", "lab/c", [(f"n{i}", 8)], started=NOW - 600, time_limit_s=1800) for i in range(n_nodes)]
    pending = [pend("a8", "lab/a", 8, gpus_per_node=8), pend("b8", "lab/b", 8, gpus_per_node=8)]
    return plan_of(snap(nodes(n_nodes), flat_teams({"a": 1, "b": 1, "c": 1}), running, pending))


def test_a_cycle_reserves_nodes_for_at_most_one_blocked_gang_per_eight_nodes():
    """Held GPUs are idle GPUs: on 8 nodes one gang reservation at a time, on 16 two."""
    gangs = [r for r in _blocked_gangs(8).reservations if r.kind == "gang"]
    assert len(gangs) == 1 and gangs[0].job_id in ("a8", "b8")
    gangs = [r for r in _blocked_gangs(16).reservations if r.kind == "gang"]
    assert sorted(r.job_id for r in gangs) == ["a8", "b8"]
    assert len({n for r in gangs for n, _ in r.placement}) == 2  # two different nodes


def test_a_blocked_session_reserves_beside_the_blocked_gang_not_instead_of_it():
    """On 8 nodes (one reservation of each kind a cycle) b's gang holds the reservation of the node that frees
    first; a's session of 2 GPUs arrives next and finds every GPU protected: it reserves the next node, and the gang
    keeps its own."""
    running = [run(f"c{i}", "lab/c", [(f"n{i}", 8)], started=NOW - 600, time_limit_s=1800 + 60 * i)
               for i in range(8)]
    teams = flat_teams({"a": 1, "b": 1, "c": 1})
    gang = pend("b8", "lab/b", 8, gpus_per_node=8)
    first = plan_of(snap(nodes(8), teams, running, [gang]))
    assert [(r.job_id, r.kind, r.placement) for r in first.reservations] == [("b8", "gang", (("n0", 8),))]
    session = pend("a-debug", "lab/a", 2, contract="debug", submit=NOW)
    plan = plan_of(snap(nodes(8), teams, running, [gang, session], first.reservations, now=NOW + 30))
    gangs = {r.job_id: r.placement for r in plan.reservations if r.kind == "gang"}
    assert gangs == {"b8": (("n0", 8),), "a-debug": (("n1", 2),)}


def _owed_teams_and_a_full_cluster(n_teams: int, jobs_each: int, spent: tuple[str, ...] = (), **pend_kw):
    """c runs jobs past their protected time on all 20 nodes of 1 GPU (a plan takes GPUs of a node no other plan of
    the cycle has touched); each of ``n_teams`` other teams (below its share) waits with ``jobs_each`` jobs of 1 GPU."""
    running = [run(f"c{i}", "lab/c", [(f"n{i}", 1)]) for i in range(20)]
    pending = [pend(f"t{t}-{j}", f"lab/t{t}", 1, submit=NOW - HOUR + j, **pend_kw)
               for t in range(n_teams) for j in range(jobs_each)]
    grants = {**{f"t{t}": 1 for t in range(n_teams)}, "c": 1}
    return snap(nodes(20, gpus=1), flat_teams(grants, spent), running, pending)


def test_a_cycle_tries_at_most_eight_preemption_plans_for_batch_work():
    """Ten teams are each owed a GPU that c holds: eight of them get one this cycle, the other two the next."""
    plan = plan_of(_owed_teams_and_a_full_cluster(10, 1))
    assert len(preempts(plan)) == 8
    assert len({p.for_job for p in preempts(plan).values()}) == 8


def test_a_team_makes_one_preemption_plan_a_cycle():
    """A team owed several GPUs that others hold gets them a plan (one job) a cycle, not all at once."""
    plan = plan_of(_owed_teams_and_a_full_cluster(1, 4))
    assert [p.for_job for p in preempts(plan).values()] == ["t0-0"]


def test_a_cycle_tries_at_most_sixteen_preemption_plans_for_debug_sessions():
    """Seventeen sessions of one team find c's out-of-budget work on every GPU: sixteen preempt a job each this
    cycle; the last is told it is tried again in the next cycle (not that everything is protected)."""
    plan = plan_of(_owed_teams_and_a_full_cluster(1, 17, spent=("c",), contract="debug"))
    assert len(preempts(plan)) == 16
    assert "t0-16" not in {p.for_job for p in preempts(plan).values()}
    assert plan.waiting_code["t0-16"] == "plan-limit" and "tried again in the next cycle" in plan.waiting["t0-16"]


# ---- the lead's order ----------------------------------------------------------------------------------------
def _lead_order(head, *behind):
    """b's protected work fills n0 (H100); n1 (H100) is free. Team a's lead put ``head`` first."""
    running = [run("b-n0", "lab/b", [("n0", 8)], started=NOW - 600)]
    return plan_of(snap(nodes(2), flat_teams({"a": 1, "b": 1}), running, [head, *behind]))


def test_jobs_ranked_as_high_as_the_gang_the_team_saves_for_still_start():
    """a's lead ranked a 16-GPU gang and a 1-GPU job first, the rest after: the gang cannot start, so a saves its
    share for it; the job ranked with it starts, the one ranked below waits, told why."""
    plan = _lead_order(pend("a16", "lab/a", 16, rank=0, submit=NOW - HOUR),
                       pend("a-first", "lab/a", 1, rank=0, submit=NOW - HOUR + 1),
                       pend("a-later", "lab/a", 1, rank=1, submit=NOW - 2 * HOUR))
    assert "a-first" in starts(plan) and "a-later" not in starts(plan)
    assert plan.waiting_code["a-later"] == "lead-order"


def test_a_one_gpu_job_ranked_first_holds_none_of_its_teams_jobs():
    """Saving is for gangs: a's lead ranked a 1-GPU job of a type the cluster lacks first; a's other job starts."""
    plan = _lead_order(pend("a-b200", "lab/a", 1, rank=0, gpu_type="B200"),
                       pend("a-later", "lab/a", 1, rank=1))
    assert "a-later" in starts(plan)

