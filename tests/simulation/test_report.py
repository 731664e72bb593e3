"""What the report says about teams: starved stretches, why a team went without what it was owed, and which teams
the per-team report lists."""

from __future__ import annotations

from scheduling.pyramid import TeamSample
from scheduling.simulation.report import OwedReasons, Starvation
from scheduling.simulation.trace import TraceJob
from tests.simulation.test_engine import replay


def test_a_stretch_without_gpus_counts_only_while_the_team_is_in_budget_and_each_team_keeps_its_longest():
    """lab/a waits with nothing running from 0 to 100 and from 150 to 170: its longest stretch stays 100. lab/b,
    out of budget (no in-budget demand) with work waiting, is not starved: its work runs as scavenger work only."""
    starving, fed = TeamSample(demand=4.0, allocated=0.0), TeamSample(demand=4.0, allocated=4.0)
    spent = TeamSample(demand=0.0, allocated=0.0, demand_all=4.0)
    s = Starvation()
    for start, a in ((0.0, starving), (100.0, fed), (150.0, starving), (170.0, fed)):
        s.track({"lab/a": a, "lab/b": spent}, start)
    s.close(200.0)
    assert s.per_team == {"lab/a": 100.0} and s.longest == (100.0, "lab/a")


def test_a_team_owed_less_than_its_smallest_waiting_job_is_told_apart_from_one_whose_jobs_exceed_its_share():
    """Entitled to 3 GPUs and running 2, the team is owed 1 while its waiting jobs ask for 8 and 2: the smallest is
    within its entitlement, so the GPU it goes without is ``larger-than-owed``; entitled to 1.2 and running
    nothing, every job is larger than its whole entitlement: ``larger-than-entitled``."""
    firsts = {"lab/a": ((8, "waits"), (2, "waits"))}
    reasons = OwedReasons()
    reasons.add({"lab/a": TeamSample(demand=12.0, allocated=2.0)}, {"lab/a": 3.0}, firsts, 10.0)
    reasons.add({"lab/a": TeamSample(demand=10.0, allocated=0.0)}, {"lab/a": 1.2}, firsts, 10.0)
    assert reasons.sums == {"larger-than-owed": 10.0, "larger-than-entitled": 12.0}


def test_the_team_report_lists_every_team_with_a_budget_of_its_own_even_without_jobs(tmp_path):
    """lab keeps 100 of its 1,000 GPU-hours for itself and lab/b has 300, neither with a job: both are listed; a
    group that split its whole grant and has no job would not be."""
    budgets = tmp_path / "budgets.csv"
    budgets.write_text("team,gpu_hours\nlab,1000\nlab/a,600\nlab/b,300\n")
    result = replay(budgets, [TraceJob(id="j", submit_s=0, team="lab/a", gpus=1, duration_s=600)], per_team=True)
    assert set(result.teams) == {"lab", "lab/a", "lab/b"}
    assert result.teams["lab"]["budget_gpu_hours"] == 100 and result.teams["lab/b"]["jobs"] == 0
