"""Invariants on random small traces: no GPU given twice, metrics never above their ceilings."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.simulation.check import check_schedule
from scheduling.simulation.cli import make_policy, write_schedule
from scheduling.simulation.engine import SimConfig, Simulator
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
    nodes = parse_nodes("2x8:H100")
    cfg = SimConfig(nodes=nodes, budgets=load_budgets(str(budgets_file)), horizon_s=40_000.0, seed=seed,
                    mtbf_hours=3 if fail else None, repair_hours=1, debug_rate_per_hour=1, progress=False)
    result = Simulator(cfg, jobs, make_policy(policy, jobs)).run()
    path = tmp_path / f"{policy}-{seed}.csv"
    write_schedule(str(path), result.schedule)
    assert check_schedule(str(path), nodes) == []
    m = result.metrics
    if m["impact"] is not None:
        assert m["impact"] <= m["impact_ceiling"] + 1e-9 <= 1 + 2e-9
    if m["occupancy"] is not None:
        assert m["occupancy"] <= m["occupancy_ceiling"] + 1e-9
    assert m["completed_jobs"] + m["never_started"] <= m["jobs"] == len(jobs)
    for r in result.schedule:
        assert r[4] <= r[5] <= 40_000.0
