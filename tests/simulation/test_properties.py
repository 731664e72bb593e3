"""Invariants on random small traces: no GPU given twice, no job over two GPU types, metrics never above their
ceilings."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.simulation.check import check_schedule
from scheduling.simulation.cli import make_policy
from scheduling.simulation.output import write_schedule
from scheduling.simulation.engine import Simulator
from scheduling.simulation.model import SimConfig, cluster_fits
from scheduling.simulation.trace import TraceJob, load_budgets, parse_nodes

job = st.tuples(
    st.floats(0, 20_000), st.sampled_from(["lab/a", "lab/b"]), st.sampled_from([1, 1, 2, 3, 4, 8, 12]),
    st.floats(60, 30_000),
)


@pytest.mark.parametrize("policy", ["budget", "fifo-backfill", "static-priority", "quota-borrowing"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(job, max_size=40), seed=st.integers(0, 1000), fail=st.booleans())
def test_random_replays_keep_the_invariants(policy, rows, seed, fail, budgets_file, tmp_path):
    jobs = [TraceJob(id=f"j{i}", submit_s=s, team=t, gpus=g, duration_s=d) for i, (s, t, g, d) in enumerate(rows)]
    jobs.sort(key=lambda j: j.submit_s)
    # two GPU types of different node sizes: a 12-GPU job fits only on the B200 nodes, never over both types
    nodes = parse_nodes("1x8:H100,1x4:B200,1x8:B200")
    # (the report has the ceiling of whole jobs too)
    cfg = SimConfig(nodes=nodes, budgets=load_budgets(str(budgets_file)), horizon_s=40_000.0, seed=seed,
                    mtbf_hours=3 if fail else None, repair_hours=1, debug_rate_per_hour=1, progress=False,
                    whole_jobs=True, idle_by_place=True)
    result = Simulator(cfg, jobs, make_policy(policy, jobs)).run()
    path = tmp_path / f"{policy}-{seed}.csv"
    write_schedule(str(path), result.schedule)
    assert check_schedule(str(path), nodes) == []
    m = result.metrics
    if m["impact"] is not None:
        assert m["impact"] <= m["impact_ceiling_whole_jobs"] + 1e-9 <= m["impact_ceiling"] + 2e-9 <= 1 + 3e-9
    if m["occupancy"] is not None:
        assert m["occupancy"] <= m["occupancy_ceiling"] + 1e-9
        # the idle GPUs, by where they sat, are what occupancy misses
        assert sum(m["occupancy_idle_by_place"].values()) == pytest.approx(1 - m["occupancy"], abs=1e-9)
    assert m["completed_jobs"] + m["never_started"] <= m["jobs"] == len(jobs)
    for r in result.schedule:
        assert r[4] <= r[5] <= 40_000.0


nested_job = st.tuples(
    st.floats(0, 20_000), st.sampled_from(["lab/g1/x", "lab/g1/y", "lab/g2/z", "lab/g1"]),
    st.sampled_from([1, 1, 2, 4, 8, 16]), st.floats(60, 30_000), st.sampled_from(["train", "train", "debug"]),
    st.sampled_from([None, None, "H100", "B200"]), st.sampled_from([None, None, 600.0, 7200.0]),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(nested_job, max_size=40), seed=st.integers(0, 1000), fail=st.booleans(),
       scale=st.sampled_from([0.02, 1.0]), save=st.sampled_from([60.0, 120.0, None]))
def test_budget_policy_on_nested_teams_spent_budgets_sessions_and_two_gpu_types(rows, seed, fail, scale, save,
                                                                                tmp_path):
    """The budget policy on a two-level tree with a parent's own members, budgets that run out (scale 0.02),
    trace debug sessions (some typed, some too large for a session) on a typed debug pool, run-time limits (some
    shorter than the run), node failures, and checkpoint saves longer than some notices (120 s: work started as
    scavenger gets the scavenger contract's 60 s) or as long as every grace (None):
    no GPU given twice, no rule broken (the simulator checks protection and holds as it goes)."""
    budgets = tmp_path / "budgets.csv"
    budgets.write_text("team,gpu_hours\n" + "".join(
        f"{t},{g * scale:.3f}\n" for t, g in
        (("lab", 1000), ("lab/g1", 600), ("lab/g1/x", 300), ("lab/g1/y", 200), ("lab/g2", 400), ("lab/g2/z", 400))))
    jobs = [TraceJob(id=f"j{i}", submit_s=s, team=t, gpus=g, duration_s=d, kind=k, gpu_type=gt, time_limit_s=lim)
            for i, (s, t, g, d, k, gt, lim) in enumerate(rows)]
    jobs.sort(key=lambda j: j.submit_s)
    nodes = parse_nodes("2x8:H100,1x8:B200")
    cfg = SimConfig(nodes=nodes, budgets=load_budgets(str(budgets)), horizon_s=40_000.0, seed=seed,
                    mtbf_hours=3 if fail else None, repair_hours=1, debug_rate_per_hour=2,
                    debug_pool_nodes=("h100-000", "b200-000"), checkpoint_save_s=save, progress=False,
                    whole_jobs=True, idle_by_place=True)
    sim = Simulator(cfg, jobs, make_policy("budget", jobs))
    result = sim.run()
    # the job sizes the ceiling of whole jobs reads are the jobs still pending or running, team by team
    left = {}
    for j in [*(j for q in sim.team_pending.values() for j in q), *sim.running.values()]:
        left.setdefault(j.team, {}).setdefault(j.gpus, 0)
        left[j.team][j.gpus] += 1
    assert {t: s for t, s in sim.sizes.items() if s} == left
    path = tmp_path / f"nested-{seed}.csv"
    write_schedule(str(path), result.schedule)
    assert check_schedule(str(path), nodes) == []
    m = result.metrics
    if m["impact"] is not None:
        assert m["impact"] <= m["impact_ceiling_whole_jobs"] + 1e-9 <= m["impact_ceiling"] + 2e-9
    if m["occupancy"] is not None:
        assert sum(m["occupancy_idle_by_place"].values()) == pytest.approx(1 - m["occupancy"], abs=1e-9)
    fits = cluster_fits(nodes)
    assert m["debug_as_batch"] == sum(1 for j in jobs if j.kind == "debug" and j.gpus > 8 and fits(j))
    limit = {j.id: j.time_limit_s for j in jobs}
    for job_id, _, _, _, start, end, _ in result.schedule:  # no run outlives its user's limit
        if limit.get(job_id) is not None:
            assert end - start <= limit[job_id] + 1e-6


op = st.one_of(
    st.tuples(st.just("place"), st.sampled_from([1, 1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24]),
              st.sampled_from([None, "H100", "B200"]), st.sampled_from([None, None, 2, 4, 8])),
    st.tuples(st.just("give"), st.integers(0, 20), st.none(), st.none()),
)


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(op, max_size=60))
def test_the_baselines_placement_memory_gives_the_same_placements(ops):
    """FreeMap remembers the shapes that found no room until GPUs are given back, and keeps its free GPUs by node
    and by type as jobs take and give them: every answer must equal the one a map built from scratch on the same
    running jobs gives (the baselines' walk relies on it)."""
    from scheduling.policy.types import NodeState, RunningJob
    from scheduling.simulation.placement import FreeMap

    nodes = [NodeState(id=f"n{i}", gpu_type="H100" if i < 3 else "B200", gpus=8 if i % 2 else 4)
             for i in range(5)]
    fm = FreeMap(nodes)
    taken: list = []
    for kind, a, gpu_type, gpn in ops:
        if kind == "give":
            if taken:
                fm.give(taken.pop(a % len(taken)))
            continue
        fresh = FreeMap(nodes, [RunningJob(id=f"r{i}", team="t", gpus=sum(g for _, g in p), contract="standard",
                                           placement=p, started_s=0.0, submit_s=0.0) for i, p in enumerate(taken)])
        assert (fm.free, fm.total) == (fresh.free, fresh.total)
        want = fresh.place(a, gpu_type, gpn)
        assert fm.place(a, gpu_type, gpn) == want
        if want is not None:
            fm.take(want)
            taken.append(want)


def test_a_job_over_several_nodes_is_placed_where_a_one_node_job_found_no_room():
    """One node's job failing says nothing of a job that spans nodes: 6 GPUs find no node, 10 take three."""
    from scheduling.policy.types import NodeState
    from scheduling.simulation.placement import FreeMap

    fm = FreeMap([NodeState(id="a", gpu_type="H100", gpus=4), NodeState(id="b", gpu_type="H100", gpus=8),
                  NodeState(id="c", gpu_type="H100", gpus=4)])
    fm.take((("b", 3),))
    assert fm.place(6, "H100") is None and fm.place(7, "H100") is None
    assert fm.place(10, "H100") == (("a", 4), ("b", 5), ("c", 1))
    fm.give((("b", 3),))
    assert fm.place(6, "H100") == (("b", 6),)  # room again once GPUs come back
