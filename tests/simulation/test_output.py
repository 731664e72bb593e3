"""The targets under the table: issue #3's bars, checked on the replay just made."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from scheduling.simulation.cli import main
from scheduling.simulation.output import (
    TEAM_COLUMNS, finite_report, format_table, human_duration, report_json, schedule_rows, targets, team_rows,
)


def _budget(**kw) -> dict:
    m = {"occupancy": 0.97, "occupancy_ceiling": 1.0, "impact": 0.95, "impact_ceiling": 1.0, "wait_p95_s": 5 * 86400,
         "debug_sessions": 0, "debug_wait_p95_s": None, "lost_gpu_hours": 2.0, "delivered_gpu_hours": 100.0,
         "preempted_batch_jobs": 5, "started_batch_jobs": 100}
    m.update(kw)
    return m


def _verdicts(report: dict) -> dict[str, bool | None]:
    return {t.label: t.met for t in targets(report)}


def test_targets_exactly_at_their_bars_are_met_and_baselines_are_compared_only_when_replayed():
    checks = _verdicts({"policies": {"budget": _budget()}})
    assert checks == {
        "occupancy >= 0.97 of its ceiling": True, "impact >= 0.95 of its ceiling": True,
        "lost work <= 2% of delivered": True, "preempted batch jobs <= 5% of started": True,
    }


def test_a_target_missed_is_named_and_so_is_the_baseline_that_beat_impact():
    report = {"policies": {
        "budget": _budget(impact=0.9, impact_ceiling=0.95, wait_p95_s=6 * 86400, preempted_batch_jobs=6,
                          debug_sessions=10, debug_wait_p95_s=61.0),
        "static-priority": _budget(impact=0.5, wait_p95_s=5 * 86400),
        "quota-borrowing": _budget(impact=0.96),
    }}
    checks = _verdicts(report)
    assert checks["impact >= 0.95 of its ceiling"] is False  # 0.9 / 0.95 = 0.947
    assert checks["impact above every baseline's"] is False
    assert checks["p95 wait <= static-priority's"] is False
    assert checks["debug p95 wait <= 60 s"] is False
    assert checks["preempted batch jobs <= 5% of started"] is False
    assert checks["occupancy >= 0.97 of its ceiling"] is True
    shown = {t.label: t.shown for t in targets(report)}
    assert shown["impact above every baseline's"] == "0.947 vs 0.960 (quota-borrowing)"
    table = format_table({"demand_ratio": 2.0, "policies": report["policies"]})
    assert "preempted batch jobs <= 5% of started" in table and "6.0%" in table and "NOT MET" in table


def test_a_tie_with_the_best_baseline_is_no_miss():
    """On a cluster that serves every job every policy reaches its ceiling: budget is not below any baseline. A
    difference the table cannot show (Philly September 4-18, at 0.17x: 0.999991 against 0.999996, the seconds jobs
    wait for a cycle, counted while their team is in budget) is a tie; a thousandth is a miss."""
    report = {"policies": {"budget": _budget(impact=1.0), "fifo-backfill": _budget(impact=1.0)}}
    assert _verdicts(report)["impact above every baseline's"] is True
    report["policies"]["fifo-backfill"]["impact"] = 1.0 + 5e-6 * report["policies"]["budget"]["impact_ceiling"]
    assert _verdicts(report)["impact above every baseline's"] is True
    shown = {t.label: t.shown for t in targets(report)}["impact above every baseline's"]
    assert shown.endswith("(fifo-backfill; a tie)")
    report["policies"]["fifo-backfill"]["impact"] = 1.0 + 1e-3 * report["policies"]["budget"]["impact_ceiling"]
    assert _verdicts(report)["impact above every baseline's"] is False


def test_no_targets_without_the_budget_policy_and_no_verdict_without_a_measure():
    assert targets({"policies": {"fifo-backfill": _budget()}}) == []
    checks = _verdicts({"policies": {"budget": _budget(started_batch_jobs=0, debug_sessions=3)}})
    assert checks["preempted batch jobs <= 5% of started"] is None  # nothing started: nothing to measure
    assert checks["debug p95 wait <= 60 s"] is None


def test_every_target_gives_its_figure_its_bar_and_its_baseline_in_the_json():
    report = {"policies": {
        "budget": _budget(wait_p95_s=3600.0, debug_sessions=4, debug_wait_p95_s=60.0, impact=0.97),
        "static-priority": _budget(wait_p95_s=3600.0, impact=0.5), "quota-borrowing": _budget(impact=0.8)}}
    got = {t["target"]: t for t in (t.as_json() for t in targets(report))}
    assert got["impact_above_baselines"] == {"target": "impact_above_baselines", "value": 0.97, "bar": 0.8,
                                             "met": True, "baseline": "quota-borrowing"}
    assert got["wait_p95"] == {"target": "wait_p95", "value": 3600.0, "bar": 3600.0, "met": True,
                               "baseline": "static-priority"}  # as long a wait as static-priority's: met
    assert got["debug_wait_p95"] == {"target": "debug_wait_p95", "value": 60.0, "bar": 60.0, "met": True}
    assert {t.name: t.shown for t in targets(report)}["debug_wait_p95"] == "60s"
    assert got["lost_work"] == {"target": "lost_work", "value": 0.02, "bar": 0.02, "met": True}
    assert got["preempted_jobs"] == {"target": "preempted_jobs", "value": 0.05, "bar": 0.05, "met": True}


def test_an_impact_bar_no_schedule_of_whole_jobs_reaches_is_said_beside_the_figure():
    low = {t.name: t for t in targets({"policies": {"budget": _budget(impact=0.9, impact_ceiling_whole_jobs=0.93)}})}
    assert low["impact"].shown == "0.900 (whole jobs allow at most 0.930)" and low["impact"].reachable == 0.93
    assert low["occupancy"].reachable is None and low["occupancy"].shown == "0.970"
    high = {t.name: t for t in targets({"policies": {"budget": _budget(impact=0.9, impact_ceiling_whole_jobs=0.96)}})}
    assert high["impact"].shown == "0.900" and high["impact"].reachable == 0.96


def test_durations_read_in_the_unit_that_suits_them_and_the_table_names_teams_by_their_own_name():
    assert [human_duration(s) for s in (119, 120, 7199, 7200, 2 * 86400 - 1, 2 * 86400)] == [
        "119s", "2.0m", "120.0m", "2.0h", "48.0h", "2.0d"]
    table = format_table({"demand_ratio": 2.0, "policies": {"budget": _budget(
        longest_starved_team="lab/nlp/pretrain", longest_starved_s=5400.0, wall_s=12.34, lost_gpu_hours=1234.56)}})
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines() if line.strip()}
    assert rows["longest_starved_team"] == ["pretrain"] and rows["longest_starved_s"] == ["90.0m"]
    assert rows["wall_s"] == ["12.3s"] and rows["lost_gpu_hours"] == ["1,234.6"] and rows["wait_p95_s"] == ["5.0d"]


def test_the_json_report_keeps_the_issues_order_and_is_indented(tmp_path):
    path = tmp_path / "r.json"
    with open(path, "w") as fh:
        report_json(fh, {"policies": {"budget": {"occupancy": 1.0, "impact": 0.5}}, "demand_ratio": 2.0})
    text = path.read_text()
    assert list(json.loads(text)) == ["policies", "demand_ratio"] and '\n  "policies": {\n    "budget"' in text
    with pytest.raises(ValueError):  # never NaN, which strict readers refuse
        report_json(io.StringIO(), {"x": float("nan")})


TABLE = """
demand_ratio: 2.500
metric                                budget  quota-borrowing
availability                               -                -
occupancy                              0.970            0.970
occupancy_ceiling                      1.000            1.000
impact                                 0.950            0.500
impact_ceiling                         1.000            1.000
impact_ceiling_whole_jobs                  -                -
impact_lost_over_share                     -                -
impact_lost_out_of_budget                  -                -
impact_lost_idle                           -                -
utilization                                -                -
wait_p50_s                                 -                -
wait_p95_s                              5.0d             5.0d
debug_wait_p95_s                           -                -
preemptions                                -                -
lost_gpu_hours                           2.0              2.0
completed_jobs                             -                -
jobs                                      12               12
never_started                              -                -
wait_jobs                                  -                -
longest_starved_s                          -                -
longest_starved_team                     nlp                -
preemptions_drain                          -                -
preemptions_debug                          -                -
preemptions_turn                           -                -
failure_stops                              -                -
squatting_flags                            -                -
debug_sessions                             0                0
debug_as_batch                             -                -
rejected                                   -                -
wall_s                                  3.2s                -
occupancy/ceiling                      0.970            0.970
impact/ceiling                         0.950            0.500
impact/whole-job ceiling                   -                -
preempted/started                          -                -
lost/delivered                         0.020            0.020

why the teams went without what they were owed, budget (--explain), over impact's denominator:
  no-plan                    0.010

in-budget batch jobs that never started, by size (--explain): never started / jobs
  1 GPU                                 2/10             0/10
  8 GPUs                                 1/2                -

where the idle GPUs sat (--explain), over the healthy GPU-time (1 - occupancy in all):
  debug-pool                               -                -
  reserved                                 -                -
  elsewhere                            0.020                -

targets of the budget policy (docs/policy.md, "Results on real traces"):
  occupancy >= 0.97 of its ceiling       0.970                             met
  impact >= 0.95 of its ceiling          0.950                             met
  impact above every baseline's          0.950 vs 0.500 (quota-borrowing)  met
  lost work <= 2% of delivered           2.0%                              met
  preempted batch jobs <= 5% of started  -                                 -
"""


def test_the_table_lists_every_metric_side_by_side_then_the_explanations_and_the_targets():
    """The whole table as a user reads it: the issue's metrics first, the ceiling of whole jobs and impact's losses
    under the ceiling, the counts, the bars' ratios; with --explain the reasons (those under 0.0005 left out), the
    sizes that never started and where the idle GPUs sat; then the targets, "-" where there is nothing to measure."""
    report = {"demand_ratio": 2.5, "policies": {
        "budget": _budget(impact_lost_by_reason={"no-plan": 0.01, "held": 0.0004}, started_batch_jobs=0, jobs=12,
                          waits_by_gpus={"1": {"jobs": 10, "never_started": 2}, "8": {"jobs": 2, "never_started": 1}},
                          occupancy_idle_by_place={"elsewhere": 0.02}, longest_starved_team="lab/nlp", wall_s=3.25),
        "quota-borrowing": _budget(impact=0.5, jobs=12, waits_by_gpus={"1": {"jobs": 10, "never_started": 0}})}}
    assert format_table(report) == TABLE.strip("\n")


def test_the_teams_file_gives_each_teams_impact_as_received_over_wanted_and_leaves_unknowns_empty():
    figures = dict.fromkeys(TEAM_COLUMNS, 0)
    fh = io.StringIO()
    team_rows(fh, {"budget": {
        "lab/b": {**figures, "wanted_gpu_hours": 0.0, "received_gpu_hours": 0.0, "ran_out_s": None},
        "lab/c": {**figures, "wanted_gpu_hours": 0.5, "received_gpu_hours": 0.25, "ran_out_s": None},
        "lab/a": {**figures, "wanted_gpu_hours": 3.0, "received_gpu_hours": 2.0, "ran_out_s": 5400.25, "jobs": 7,
                  "spent_gpu_hours": 1.23456, "wait_p95_s": None}}})
    rows = list(csv.DictReader(io.StringIO(fh.getvalue())))
    shown = [(r["team"], r["impact"], r["ran_out_s"], r["jobs"], r["spent_gpu_hours"], r["wait_p95_s"]) for r in rows]
    assert shown == [("lab/a", "0.6667", "5400.2", "7", "1.235", ""), ("lab/b", "", "", "0", "0", "0"),
                     ("lab/c", "0.5000", "", "0", "0", "0")]


def test_schedule_rows_come_by_start_then_end_then_job_and_a_report_with_no_number_says_where():
    fh = io.StringIO()
    schedule_rows(fh, [("b", "lab/a", 1, "n0:1", 0.0, 20.0, "completed"),
                       ("a", "lab/a", 1, "n0:1", 0.0, 20.0, "completed"),
                       ("c", "lab/b", 1, "n1:1", 0.0, 10.0, "preempted"),
                       ("d", "lab/b", 2, "n1:2", 5.0, 6.0, "drained")])
    assert [line.split(",")[0] for line in fh.getvalue().splitlines()[1:]] == ["c", "a", "b", "d"]
    err = io.StringIO()
    clean = finite_report({"policies": {"budget": {"x": [1.0, float("inf")], "y": float("nan")}}}, err)
    assert clean == {"policies": {"budget": {"x": [1.0, None], "y": None}}}
    assert err.getvalue().splitlines() == [
        "warning: --json: policies.budget.x[1] is inf, not a number; written as null",
        "warning: --json: policies.budget.y is nan, not a number; written as null"]


def test_the_table_checks_the_targets_on_the_replays_own_figures(tmp_path, budgets_file, tiny_trace, capsys):
    out = tmp_path / "r.json"
    code = main(["simulate", "--trace", str(tiny_trace), "--nodes", "2x8:H100", "--budgets", str(budgets_file),
                 "--policy", "budget,static-priority", "--days", "1", "--debug-rate", "1", "--json", str(out)])
    assert code == 0
    table = capsys.readouterr().out
    report = json.loads(out.read_text())
    m = report["policies"]["budget"]
    block = table.split("targets of the budget policy")[1].splitlines()[1:]
    lines = {line[:40].strip(): line[40:].split() for line in block}
    occupancy = m["occupancy"] / m["occupancy_ceiling"]
    assert lines["occupancy >= 0.97 of its ceiling"] == [f"{occupancy:.3f}", "met" if occupancy >= 0.97 else "NOT"]
    assert "p95 wait <= static-priority's" in lines and "debug p95 wait <= 60 s" in lines
    preempted = m["preempted_batch_jobs"] / m["started_batch_jobs"]
    assert lines["preempted batch jobs <= 5% of started"][0] == f"{100 * preempted:.1f}%"
    # the same verdicts in the JSON, with the figures as numbers
    verdicts = {t["target"]: t for t in report["targets"]}
    assert list(verdicts) == ["occupancy", "impact", "impact_above_baselines", "wait_p95", "debug_wait_p95",
                              "lost_work", "preempted_jobs"]
    assert verdicts["occupancy"] == {"target": "occupancy", "value": occupancy, "bar": 0.97, "met": occupancy >= 0.97}
    assert verdicts["wait_p95"]["baseline"] == "static-priority"
    assert verdicts["wait_p95"]["bar"] == report["policies"]["static-priority"]["wait_p95_s"]
    assert verdicts["preempted_jobs"]["value"] == preempted
    assert [t["met"] for t in report["targets"]] == [not line.endswith("NOT MET") for line in block if line]


ROOT = Path(__file__).resolve().parents[2]
PHILLY = ROOT.parent / "shared" / "traces" / "philly" / "philly-sep-oct-2017.csv"


@pytest.mark.skipif(not PHILLY.exists(), reason="the shared Philly trace is not beside the checkout")
@pytest.mark.parametrize("sessions", [[], ["--debug-rate", "4", "--seed", "1"]], ids=["batch", "debug-rate-4"])
def test_the_shared_case_meets_every_target(tmp_path, capsys, sessions):
    """The case issue #3's bars are set on (Philly October 1-14 on 16 x 8 with the shipped budgets), as it is and
    with ``--debug-rate 4``: every target met, against static-priority's p95 wait too. A change to the policy that
    costs a bar here fails the suite. (Seed 1 with sessions: with a 2-GPU debug headroom 5.1% of the started batch
    jobs were preempted there, docs/policy.md §8.)"""
    out = tmp_path / "r.json"
    code = main(["simulate", "--trace", str(PHILLY), "--format", "philly", "--start", "2017-10-01", "--days", "14",
                 "--nodes", "16x8:H100", "--budgets", str(ROOT / "docs/examples/philly-budgets.csv"),
                 "--policy", "budget,static-priority", "--json", str(out), "--no-progress", *sessions])
    assert code == 0
    capsys.readouterr()
    report = json.loads(out.read_text())
    verdicts = {t["target"]: t["met"] for t in report["targets"]}
    expected = {"occupancy": True, "impact": True, "impact_above_baselines": True, "wait_p95": True,
                "lost_work": True, "preempted_jobs": True}
    if sessions:
        expected["debug_wait_p95"] = True
    assert verdicts == expected
    # where the rest of impact went: under the budget policy a spent team's work never holds GPUs that a team in
    # budget waits for (DESIGN §4.2); static-priority, which knows no budgets, loses most of its impact that way
    budget, static = report["policies"]["budget"], report["policies"]["static-priority"]
    assert budget["impact_lost_out_of_budget"] < 0.01 < 0.2 < static["impact_lost_out_of_budget"]
