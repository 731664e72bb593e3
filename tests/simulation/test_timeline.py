"""``--timeline``: each team's figures interval by interval, and its budget burning down."""

from __future__ import annotations

import csv
import json

import pytest

from scheduling.pyramid import TeamSample
from scheduling.simulation.cli import main
from scheduling.simulation.report import Timeline


def test_a_sample_across_an_interval_bound_counts_in_both_and_the_last_interval_is_averaged_over_its_part():
    t = Timeline(3600.0)
    a = TeamSample(demand=4.0, allocated=2.0)
    t.add(1800.0, 3600.0, {"lab/a": a}, {"lab/a": 3.0})  # half in [0, 1h), half in [1h, 2h)
    t.add(5400.0, 900.0, {"lab/a": TeamSample(demand=4.0, allocated=4.0)}, {"lab/a": 3.0})
    t.spend_until(0.0, 7000.0, {"lab/a": 10.0}, {"lab/a": 0.001})  # 1 GPU-hour every 1,000 s
    rows = t.rows(6300.0, {"lab/a": 16.3})
    assert rows[0] == pytest.approx((0.0, "lab/a", 1.5, 2.0, 1.0, 1.0, 0.0, 13.6))  # 1,800 s of 3,600 had it
    # [1h, 1.75h): 1,800 s at e=3, d=4, r=2, then 900 s at r=4 (received capped at e=3), over 2,700 s
    start, team, e, d, r, got, scavenger, spent = rows[1]
    assert (start, team, scavenger) == (3600.0, "lab/a", 0.0) and spent == 16.3  # the spend at the window's end
    assert (e, d, r, got) == pytest.approx((3.0, 4.0, (2 * 1800 + 4 * 900) / 2700, (2 * 1800 + 3 * 900) / 2700))


def test_the_burn_down_notes_every_interval_end_the_clock_passes_each_team_at_its_own_rate():
    """The replay advances the clock in steps that end on, past and between interval ends: each end gets the
    spend of that moment, a team charged nothing keeps its spend, one with no entitlement is entitled to 0 GPUs,
    and scavenger work adds up over the samples of an interval like the rest."""
    t = Timeline(1000.0)
    t.spend_until(0.0, 2000.0, {"lab/a": 0.0, "lab/b": 5.0}, {"lab/a": 0.01})  # ends at 1,000 and exactly 2,000
    t.spend_until(2000.0, 4500.0, {"lab/a": 20.0, "lab/b": 5.0}, {"lab/b": 0.002})  # ends at 3,000 and 4,000
    teams = {"lab/a": TeamSample(demand=2.0, allocated=2.0), "lab/b": TeamSample(scavenger=3.0)}
    t.add(0.0, 2500.0, teams, {"lab/a": 2.0})
    t.add(2500.0, 2000.0, teams, {"lab/a": 2.0})  # [2,000, 3,000) has a piece of each sample
    rows = t.rows(4500.0, {"lab/a": 20.0, "lab/b": 10.0})
    spent = {(start, team): row[-1] for start, team, *row in rows}
    assert [spent[k * 1000.0, "lab/a"] for k in range(5)] == pytest.approx([10.0, 20.0, 20.0, 20.0, 20.0])
    assert [spent[k * 1000.0, "lab/b"] for k in range(5)] == pytest.approx([5.0, 5.0, 7.0, 9.0, 10.0])
    assert {tuple(row[2:7]) for row in rows if row[1] == "lab/b"} == {(0.0, 0.0, 0.0, 0.0, 3.0)}


def test_an_interval_shorter_than_a_second_is_averaged_over_its_part():
    t = Timeline(10.0)
    t.add(0.0, 0.5, {"lab/a": TeamSample(demand=1.0, allocated=1.0)}, {"lab/a": 1.0})
    assert t.rows(0.5, {"lab/a": 0.25}) == [(0.0, "lab/a", 1.0, 1.0, 1.0, 1.0, 0.0, 0.25)]


def _run(tmp_path, write_file, *extra):
    budgets = write_file(tmp_path / "b.csv", "team,gpu_hours\nlab/big,2000\nlab/small,30\n")
    rows = ["job_id,submit_s,team,gpus,duration_s"]
    for i in range(40):  # both teams ask for more than the 16 GPUs; lab/small runs out of budget
        team = "lab/big" if i % 3 else "lab/small"
        rows.append(f"j{i},{i * 600},{team},{(1, 2, 4, 8)[i % 4]},{7200 + 900 * (i % 5)}")
    trace = write_file(tmp_path / "t.csv", "\n".join(rows) + "\n")
    out = tmp_path / "r.json"
    code = main(["--trace", str(trace), "--nodes", "2x8", "--budgets", str(budgets), "--days", "1.1",
                 "--policy", "budget,static-priority", "--json", str(out), "--debug-rate", "2", *extra])
    assert code == 0
    return json.loads(out.read_text())


def test_the_timeline_adds_up_to_the_team_file_and_changes_nothing_in_the_replay(tmp_path, write_file, capsys):
    """Over the intervals, a team's received GPUs add up to its received GPU-hours of the team file (whose sums
    are the report's impact), and its spend at the last interval's end is what the team file says it spent; a
    replay with the timeline is the same replay."""
    timeline, teams = tmp_path / "timeline.csv", tmp_path / "teams.csv"
    report = _run(tmp_path, write_file, "--timeline", str(timeline), "--timeline-hours", "2",
                  "--teams-csv", str(teams))
    plain = _run(tmp_path, write_file)
    capsys.readouterr()
    strip = {name: {k: v for k, v in m.items() if k != "wall_s"} for name, m in report["policies"].items()}
    assert strip == {name: {k: v for k, v in m.items() if k != "wall_s"} for name, m in plain["policies"].items()}
    with open(timeline, newline="") as fh:
        rows = list(csv.DictReader(fh))
    with open(teams, newline="") as fh:
        per_team = {(r["policy"], r["team"]): r for r in csv.DictReader(fh)}
    assert {r["start_s"] for r in rows} == {str(h * 7200) for h in range(14)}  # 26.4 hours: 13 whole, 1 partial
    for key, r in per_team.items():
        mine = [x for x in rows if (x["policy"], x["team"]) == key]
        hours = [min(2.0, 26.4 - float(x["start_s"]) / 3600) for x in mine]
        received = sum(float(x["received_gpus"]) * h for x, h in zip(mine, hours))
        assert received == pytest.approx(float(r["received_gpu_hours"]), abs=0.01)
        assert float(mine[-1]["spent_gpu_hours"]) == pytest.approx(float(r["spent_gpu_hours"]), abs=1e-3)
        spent = [float(x["spent_gpu_hours"]) for x in mine]
        if key == ("budget", "lab/big"):
            assert spent == sorted(spent) and spent[-1] > spent[0]  # it burns down its budget, never back
        for x in mine:
            assert float(x["received_gpus"]) <= min(float(x["allocated_gpus"]), float(x["entitled_gpus"])) + 1e-3
    # static-priority runs lab/small beyond its share: it runs out of budget within hours, and is entitled to
    # nothing from then on; under budget it is held to its share and stays in budget
    assert per_team[("static-priority", "lab/small")]["ran_out_s"] != ""
    assert per_team[("budget", "lab/small")]["ran_out_s"] == ""
    small = [x for x in rows if (x["policy"], x["team"]) == ("static-priority", "lab/small")]
    assert float(small[0]["entitled_gpus"]) > 0 and float(small[-1]["entitled_gpus"]) == 0.0
    # out of budget, its work runs as scavenger work: held GPUs, but none in budget
    assert float(small[0]["scavenger_gpus"]) == 0.0 and sum(float(x["scavenger_gpus"]) for x in small) > 0
    assert all(float(x["allocated_gpus"]) == 0.0 for x in small[-3:])
    small = [float(x["entitled_gpus"]) for x in rows if (x["policy"], x["team"]) == ("budget", "lab/small")]
    assert min(small) > 0


def test_a_timeline_interval_must_be_positive(tmp_path, budgets_file, tiny_trace, capsys):
    base = ["--trace", str(tiny_trace), "--nodes", "2x8:H100", "--budgets", str(budgets_file), "--days", "1",
            "--policy", "fifo-backfill"]
    assert main([*base, "--timeline", str(tmp_path / "t.csv"), "--timeline-hours", "0"]) == 2
    assert "--timeline-hours must be > 0" in capsys.readouterr().err
