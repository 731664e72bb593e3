"""What the report says about teams: starved stretches, why a team went without what it was owed, and which teams
the per-team report lists."""

from __future__ import annotations

import pytest

from scheduling.pyramid import TeamSample
from scheduling.simulation.report import OwedReasons, Starvation
from scheduling.simulation.trace import TraceJob
from tests.policy.policy_builders import pend
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


def test_a_cycle_keeps_for_each_team_its_first_waiting_job_of_each_smaller_size_with_its_reason():
    """In its team's order, each job smaller than every one before it (the first that fits any smaller debt),
    down to the first of one GPU; a job the policy gave no reason for is ``unexplained``; a team with nothing
    waiting has no entry, so its debt counts as ``not-planned-yet``."""
    reasons = OwedReasons()
    jobs = [pend(f"lab/a-{i}", "lab/a", g, submit=float(i)) for i, g in enumerate((8, 8, 4, 2, 1, 1))]
    codes = {"lab/a-0": "gang-waits", "lab/a-1": "second", "lab/a-3": "turn", "lab/a-4": "one", "lab/a-5": "two"}
    reasons.after_cycle({"lab/a": jobs, "lab/b": []}, codes)
    assert reasons.firsts == {"lab/a": ((8, "gang-waits"), (4, "unexplained"), (2, "turn"), (1, "one"))}
    reasons.add({"lab/a": TeamSample(demand=15.0, allocated=0.0), "lab/b": TeamSample(demand=2.0)},
                {"lab/a": 3.0, "lab/b": 2.0}, reasons.firsts, 10.0)
    assert reasons.sums == {"turn": 30.0, "not-planned-yet": 20.0}
    assert list(reasons.shares(100.0).items()) == [("turn", 0.3), ("not-planned-yet", 0.2)]
    assert reasons.shares(0.0) == {}


def test_a_job_owed_whole_is_one_within_half_a_gpu_of_the_debt():
    """A debt of 2.5 GPUs is owed a job of 3 whole; one of exactly half a GPU is not ``part-of-a-gpu`` (a job
    larger than it and than its entitlement is ``larger-than-entitled``); a job of 2 GPUs is within a whole
    entitlement of 1.5 (``larger-than-owed`` while the team runs half a GPU of it)."""
    cases = [(2.5, 0.0, 3, "waits"), (0.5, 0.0, 2, "larger-than-entitled"), (1.5, 0.5, 2, "larger-than-owed"),
             (2.0, 1.0, 2, "larger-than-owed"), (0.8, 0.5, 1, "part-of-a-gpu")]
    for e, r, gpus, why in cases:
        reasons = OwedReasons()
        reasons.add({"lab/a": TeamSample(demand=10.0, allocated=r)}, {"lab/a": e}, {"lab/a": ((gpus, "waits"),)}, 1.0)
        assert reasons.sums == {why: pytest.approx(e - r)}, (e, r, gpus)


def test_the_team_report_lists_every_team_with_a_budget_of_its_own_even_without_jobs(tmp_path):
    """lab keeps 100 of its 1,000 GPU-hours for itself and lab/b has 300, neither with a job: both are listed; a
    group that split its whole grant and has no job would not be."""
    budgets = tmp_path / "budgets.csv"
    budgets.write_text("team,gpu_hours\nlab,1000\nlab/a,600\nlab/b,300\n")
    result = replay(budgets, [TraceJob(id="j", submit_s=0, team="lab/a", gpus=1, duration_s=600)], per_team=True)
    assert set(result.teams) == {"lab", "lab/a", "lab/b"}
    assert result.teams["lab"]["budget_gpu_hours"] == 100 and result.teams["lab/b"]["jobs"] == 0
