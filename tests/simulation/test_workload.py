"""The jobs a replay runs (workload.py): which trace jobs enter the queue and under which contract, and the synthetic
streams that ``simulate``'s options add (``--debug-rate`` sessions, ``--squatters``, ``--debug-forget``)."""

from __future__ import annotations

import statistics

import pytest

from scheduling.simulation.model import LONG_THRESHOLD_S, SimConfig, cluster_fits, session_gpus
from scheduling.simulation.trace import Budgets, TraceJob, parse_nodes
from scheduling.simulation.workload import batch_contract, build_jobs

HOUR = 3600.0
# lab/a holds three quarters of the budget, lab/b a quarter, lab/idle nothing
BUDGETS = Budgets(grant={"lab": 400.0, "lab/a": 300.0, "lab/b": 100.0, "lab/idle": 0.0},
                  parent={"lab": None, "lab/a": "lab", "lab/b": "lab", "lab/idle": "lab"})


def workload(trace=(), nodes="2x8:H100", end=100 * HOUR, **kw):
    cfg = SimConfig(nodes=parse_nodes(nodes), budgets=BUDGETS, progress=False, **kw)
    return build_jobs(cfg, list(trace), list(cfg.nodes), end)


def job(job_id, gpus=1, **kw):
    return TraceJob(id=job_id, submit_s=kw.pop("submit_s", 0.0), team=kw.pop("team", "lab/a"), gpus=gpus,
                    duration_s=kw.pop("duration_s", HOUR), **kw)


def test_a_job_longer_than_the_threshold_runs_under_long_and_one_of_exactly_it_under_standard():
    cfg = SimConfig(nodes=parse_nodes("1x8"), budgets=BUDGETS)
    assert [batch_contract(cfg, d) for d in (LONG_THRESHOLD_S - 1, LONG_THRESHOLD_S, LONG_THRESHOLD_S + 1)] == [
        "standard", "standard", "long"]
    w = workload([job("short"), job("long", duration_s=2 * LONG_THRESHOLD_S), job("dbg", kind="debug")])
    assert {j.id: j.contract for j in w.jobs} == {"short": "standard", "long": "long", "dbg": "debug"}


def test_jobs_no_node_set_could_hold_are_refused_and_counted_each():
    trace = [job("ok", 16), job("too-big", 17), job("no-b200-room", 9, gpu_type="B200"),
             job("b200", 8, gpu_type="B200"), job("no-such-type", 1, gpu_type="B300"), job("also-too-big", 40)]
    w = workload(trace, nodes="2x8:H100,1x8:B200")
    assert [j.id for j in w.jobs] == ["b200", "ok"] and w.rejected == 4  # the same submit time: by id


def test_a_cluster_holds_a_job_of_any_type_up_to_its_largest_type_and_a_typed_one_up_to_its_own():
    fits = cluster_fits(parse_nodes("2x8:H100,1x4:B200"))
    assert [fits(job("x", g)) for g in (16, 17)] == [True, False]
    assert [fits(job("x", g, gpu_type="B200")) for g in (4, 5)] == [True, False]
    assert not fits(job("x", 1, gpu_type="B300"))
    assert not cluster_fits(())(job("x", 1))


def test_a_session_larger_than_the_portal_accepts_runs_as_a_batch_job_and_is_counted():
    trace = [job("s1", 9, kind="debug"), job("s2", 16, kind="debug"), job("s3", 8, kind="debug")]
    w = workload(trace)
    assert {j.id: (j.kind, j.contract) for j in w.jobs} == {
        "s1": ("train", "standard"), "s2": ("train", "standard"), "s3": ("debug", "debug")}
    assert w.debug_as_batch == 2


def test_a_job_of_a_team_the_budgets_do_not_know_stops_with_its_line_and_field():
    with pytest.raises(ValueError, match=r"^line 7: team: unknown team 'lab/c' \(not in the budget file\)$"):
        workload([job("x", team="lab/c", line=7)])


def test_the_debug_rate_stream_is_poisson_over_the_window_in_proportion_to_budget_shares():
    w = workload(debug_rate_per_hour=4, end=200 * HOUR, seed=5)
    sessions = w.jobs
    assert all((j.kind, j.contract, j.util) == ("debug", "debug", 0.1) for j in sessions)
    assert 800 * 0.85 < len(sessions) < 800 * 1.15  # 4 an hour for 200 hours
    submits = [j.submit_s for j in sessions]
    assert submits == sorted(submits) and 0 < submits[0] and submits[-1] < 200 * HOUR
    gaps = [b - a for a, b in zip([0.0, *submits], submits)]
    assert statistics.mean(gaps) == pytest.approx(HOUR / 4, rel=0.15)  # exponential gaps of a quarter hour
    assert statistics.stdev(gaps) == pytest.approx(HOUR / 4, rel=0.2)
    minutes = [j.duration_s / 60 for j in sessions]
    assert 30 <= min(minutes) < 35 and 115 < max(minutes) <= 120
    assert statistics.mean(minutes) == pytest.approx(75, abs=5)
    assert {j.gpus for j in sessions} == {1, 2}
    teams = [j.team for j in sessions]
    assert "lab/idle" not in teams and teams.count("lab/a") / len(teams) == pytest.approx(0.75, abs=0.05)
    assert [j.id for j in sessions] == [f"debug-{k}" for k in range(len(sessions))]  # as the schedule CSV shows them


def test_generated_ids_never_take_a_trace_jobs_id_and_the_streams_follow_the_seed():
    trace = [job("debug-0"), job("squat-0", submit_s=1.0)]
    w = workload(trace, debug_rate_per_hour=1, squatters=2, end=10 * HOUR, seed=1)
    ids = [j.id for j in w.jobs]
    assert len(set(ids)) == len(ids) and {"debug-0", "squat-0", "debug-0~1", "squat-0~1"} <= set(ids)
    again = workload(trace, debug_rate_per_hour=1, squatters=2, end=10 * HOUR, seed=1)
    other = workload(trace, debug_rate_per_hour=1, squatters=2, end=10 * HOUR, seed=2)
    key = [(j.id, j.submit_s, j.team, j.gpus, j.duration_s) for j in w.jobs]
    assert key == [(j.id, j.submit_s, j.team, j.gpus, j.duration_s) for j in again.jobs]
    assert key != [(j.id, j.submit_s, j.team, j.gpus, j.duration_s) for j in other.jobs]
    assert [j.key for j in w.jobs] == sorted(j.key for j in w.jobs)  # in queue order


def test_sessions_are_no_larger_than_the_largest_node():
    assert session_gpus(parse_nodes("4x1")) == (1, 1)
    assert session_gpus(parse_nodes("1x1,1x8")) == (1, 2)
    assert session_gpus(()) == (1, 2)
    assert {j.gpus for j in workload(nodes="4x1", debug_rate_per_hour=4, end=20 * HOUR).jobs} == {1}


def test_squatters_hold_one_to_eight_gpus_for_three_days_at_zero_utilization_submitted_in_the_first_half():
    w = workload(squatters=200, end=10 * 86400.0, seed=3)
    assert len(w.jobs) == 200
    assert all((j.kind, j.contract, j.util, j.duration_s) == ("squat", "standard", 0.0, 3 * 86400.0) for j in w.jobs)
    assert {j.gpus for j in w.jobs} == {1, 2, 4, 8}
    submits = [j.submit_s for j in w.jobs]
    assert 0 <= min(submits) < 0.1 * 86400 and 4.5 * 86400 < max(submits) <= 5 * 86400
    teams = [j.team for j in w.jobs]
    assert "lab/idle" not in teams and teams.count("lab/a") / len(teams) == pytest.approx(0.75, abs=0.1)
    assert {j.gpus for j in workload(nodes="3x4", squatters=50).jobs} == {1, 2, 4}  # capped at the largest node
    assert {j.gpus for j in workload(nodes="2x16", squatters=50).jobs} == {1, 2, 4, 8}  # never more than 8


def test_no_stream_without_its_option():
    trace = [job("a"), job("dbg", kind="debug")]
    w = workload(trace)
    assert [j.id for j in w.jobs] == ["a", "dbg"] and not any(j.forgotten for j in w.jobs)


@pytest.mark.parametrize(("share", "forgotten"), [(0.0, 0), (1.0, 60)])
def test_a_forget_share_of_none_or_all_leaves_no_session_or_every_session_open(share, forgotten):
    trace = [job(f"d{i}", kind="debug", submit_s=float(i)) for i in range(60)] + [job("batch")]
    w = workload(trace, debug_forget_share=share)
    assert sum(j.forgotten for j in w.jobs) == forgotten
    assert not next(j for j in w.jobs if j.id == "batch").forgotten


def test_a_forget_share_leaves_about_that_share_of_sessions_open():
    trace = [job(f"d{i}", kind="debug", submit_s=float(i)) for i in range(400)]
    w = workload(trace, debug_forget_share=0.25, seed=4)
    assert sum(j.forgotten for j in w.jobs) / 400 == pytest.approx(0.25, abs=0.06)
    again, other = (workload(trace, debug_forget_share=0.25, seed=seed) for seed in (4, 5))
    assert [j.forgotten for j in again.jobs] == [j.forgotten for j in w.jobs]  # the seed decides, as for every stream
    assert [j.forgotten for j in other.jobs] != [j.forgotten for j in w.jobs]
