"""The targets under the table: issue #3's bars, checked on the replay just made."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduling.simulation.cli import main
from scheduling.simulation.output import format_table, targets


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
