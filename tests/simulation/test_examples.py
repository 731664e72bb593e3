"""The example generators in docs/examples write files the simulator reads, the same ones for the same seed."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

from scheduling.simulation.model import demand_ratio
from scheduling.simulation.trace import load_budgets, load_trace, parse_nodes

ROOT = Path(__file__).resolve().parents[2]
NODES = "2x8:H100,1x8:B200"


def _example(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / f"docs/examples/{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (a dataclass resolves its annotations through its module)
    spec.loader.exec_module(module)
    return module


def _synthetic():
    return _example("synthetic_trace")


def _write(tmp_path, name, *options):
    trace, budgets = tmp_path / f"{name}.csv", tmp_path / f"{name}-budgets.csv"
    _synthetic().main(["--seed", "5", "--days", "2", "--nodes", NODES, "--trace", str(trace),
                       "--budgets", str(budgets), *options])
    b = load_budgets(str(budgets))
    return load_trace(str(trace), b.grant), b, trace.read_bytes()


def _small_philly(tmp_path, jobs=((8, "6214e9"), (1, "b436b2"), (16, "ee9e8c"))) -> Path:
    """A Philly-form trace of 20 hours on October 1, 2017: each hour one job of each (GPUs, VC) of ``jobs``, run for
    2, 4 or 6 hours."""
    philly = tmp_path / "philly.csv"
    rows = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    rows += [f"2017-10-01 {h:02d}:00:00,{7200 * (1 + h % 3)},{g},0,{vc}" for h in range(20) for g, vc in jobs]
    philly.write_text("\n".join(rows) + "\n")
    return philly


def test_the_synthetic_lab_loads_and_asks_for_the_demand_it_was_given(tmp_path):
    jobs, budgets, _ = _write(tmp_path, "lab")
    teams = {j.team for j in jobs}
    assert len(teams) == 13 and all(t.count("/") == 2 for t in teams)
    assert {j.kind for j in jobs} == {"train", "eval", "debug"}
    assert {j.gpu_type for j in jobs} == {None, "H100", "B200"}
    nodes = parse_nodes(NODES)
    # 2.5 asked, less the jobs larger than one GPU type's 16 GPUs here (rejected at submit, never demand)
    assert 2.2 <= demand_ratio(jobs, nodes, 2 * 86400) <= 2.5
    # the root is the cluster's GPU-hours at the types' prices (a B200 hour costs two), the teams share it
    assert budgets.grant["lab"] == 2 * 24 * (16 + 2 * 8)
    assert sum(g for t, g in budgets.grant.items() if t.count("/") == 2) <= budgets.grant["lab"]


def test_the_same_seed_writes_the_same_jobs_with_and_without_sessions_and_types(tmp_path):
    jobs, _, raw = _write(tmp_path, "a")
    assert _write(tmp_path, "b")[2] == raw
    plain, _, _ = _write(tmp_path, "c", "--no-debug", "--untyped")
    assert [(j.id, j.submit_s, j.team, j.gpus, j.duration_s) for j in plain] == \
        [(j.id, j.submit_s, j.team, j.gpus, j.duration_s) for j in jobs]
    assert {j.kind for j in plain} == {"train", "eval"} and {j.gpu_type for j in plain} == {None}


def test_time_limits_are_round_values_above_each_run_time_and_the_same_for_the_same_seed(tmp_path):
    _, budgets, _ = _write(tmp_path, "lab", "--no-debug")
    limited = tmp_path / "limited.csv"
    _example("time_limits").main([str(tmp_path / "lab.csv"), str(limited), "--seed", "3"])
    jobs = load_trace(str(limited), budgets.grant)
    module = _example("time_limits")
    given = [j for j in jobs if j.time_limit_s is not None]
    assert 0.7 < len(given) / len(jobs) < 0.9  # a fifth give none
    rounds = module.ROUND_LIMITS_S
    for j in given:  # no job would be stopped; the limit is the round value at or above up to 5x its run time
        assert j.duration_s <= j.time_limit_s <= min([r for r in rounds if r >= 5 * j.duration_s], default=math.inf)
        assert j.time_limit_s in rounds or j.time_limit_s % 86400 == 0
    again = tmp_path / "again.csv"
    module.main([str(tmp_path / "lab.csv"), str(again), "--seed", "3"])
    assert again.read_bytes() == limited.read_bytes()


def test_the_gang_mix_redraws_sizes_and_keeps_each_jobs_gpu_hours_and_submit_time(tmp_path):
    philly = tmp_path / "philly.csv"
    rows = ["timestamp,duration,num_gpus,gpu_time,cluster", "2017-09-30 23:00:00,100,1,100,aa"]  # before the window
    rows += [f"2017-10-01 {h:02d}:{m:02d}:00,{3600 + 60 * m},{g},0,{vc}"
             for h in range(24) for m, g, vc in ((5, 1, "aa"), (20, 2, "bb"), (40, 8, "aa"))]
    philly.write_text("\n".join(rows) + "\n")
    module = _example("philly_gangs")
    out, again, other = tmp_path / "g.csv", tmp_path / "again.csv", tmp_path / "other.csv"
    module.main(["--philly", str(philly), "--start", "2017-10-01", "--days", "1", "--trace", str(out)])
    jobs = load_trace(str(out), {"philly": 1.0, "philly/aa": 0.5, "philly/bb": 0.5})
    assert len(jobs) == 72
    sizes = {g for g, _ in module.MIXES["heavy"]}
    assert {j.gpus for j in jobs} <= sizes and max(j.gpus for j in jobs) >= 16  # 72 draws: some gangs
    for j, (h, m, g) in zip(jobs, [(h, m, g) for h in range(24) for m, g in ((5, 1), (20, 2), (40, 8))]):
        assert j.submit_s == h * 3600 + m * 60
        assert j.gpus * j.duration_s == pytest.approx(g * (3600 + 60 * m), abs=j.gpus)  # run time rounded to 1 s
    module.main(["--philly", str(philly), "--start", "2017-10-01", "--days", "1", "--trace", str(again)])
    module.main(["--philly", str(philly), "--start", "2017-10-01", "--days", "1", "--seed", "2", "--trace",
                 str(other)])
    assert again.read_bytes() == out.read_bytes() != other.read_bytes()


def test_the_gang_script_keeps_sizes_with_mix_none_and_appends_jobs(tmp_path, capsys):
    philly = tmp_path / "philly.csv"
    philly.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 01:00:00,600,2,1200,aa\n"
                      "2017-10-01 03:00:00,60,1,60,bb\n")
    module = _example("philly_gangs")
    out = tmp_path / "g.csv"
    module.main(["--philly", str(philly), "--start", "2017-10-01", "--days", "1", "--mix", "none",
                 "--add", "bb:16:2:0.1", "--trace", str(out)])
    jobs = load_trace(str(out), {"philly": 1.0, "philly/aa": 0.5, "philly/bb": 0.5})
    assert [(j.submit_s, j.team, j.gpus, j.duration_s) for j in jobs] == [
        (3600, "philly/aa", 2, 600), (8640, "philly/bb", 16, 7200), (10800, "philly/bb", 1, 60)]
    with pytest.raises(SystemExit):
        module.main(["--philly", str(philly), "--start", "2017-10-01", "--add", "bb:16", "--trace", str(out)])
    assert "expected VC:GPUS:HOURS:DAY" in capsys.readouterr().err


def test_the_typed_script_writes_the_window_in_three_groups_or_several_times_over_a_group_per_copy(tmp_path, capsys):
    philly = tmp_path / "philly.csv"
    philly.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-09-30 23:00:00,60,1,0,6214e9\n"
                      "2017-10-01 00:30:00,60,2,0,b436b2\n2017-10-01 01:00:00,600,8,0,6214e9\n")
    typed = _example("philly_typed")
    expected = {1: [(1800, "lab/speech/b436b2", 2), (3600, "lab/vision/6214e9", 8)],
                3: [(1800, f"lab/copy{k}/b436b2", 2) for k in range(3)]
                + [(3600, f"lab/copy{k}/6214e9", 8) for k in range(3)]}
    for copies, jobs in expected.items():
        trace, budgets = tmp_path / f"t{copies}.csv", tmp_path / f"b{copies}.csv"
        typed.main(["--philly", str(philly), "--start", "2017-10-01", "--typed", "0", "--copies", str(copies),
                    "--trace", str(trace), "--budgets", str(budgets)])
        b = load_budgets(str(budgets))
        assert [(j.submit_s, j.team, j.gpus) for j in load_trace(str(trace), b.grant)] == jobs  # (09-30: out)
        groups = {team: hours for team, hours in b.grant.items() if team.count("/") == 1}
        assert sorted(groups) == sorted({team.rsplit("/", 1)[0] for _, team, _ in jobs})
        assert b.grant["lab"] == sum(groups.values())
    assert len(set(groups.values())) == 1  # each copy's group the same budget
    assert capsys.readouterr().out.startswith("2 jobs, 0 with a GPU type")


def test_the_bars_script_replays_its_cases_and_names_the_targets_they_miss(tmp_path, capsys):
    """docs/examples/bars.py: one row per case under all four policies, from inputs it writes itself (the shared
    case's budgets as they are, a typed trace by philly_typed.py); the table on stdout and in --out alike."""
    philly = _small_philly(tmp_path)
    out = tmp_path / "bars.md"
    bars = _example("bars")
    assert bars.main(["--cases", "shared,typed-88", "--philly", str(philly), "--workers", "1", "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert table == out.read_text()
    lines = table.splitlines()
    assert len(lines) == 6 and lines[2].startswith("| Oct 1-14, 16x8 (the shared case) |")
    missed = [c.strip() for c in lines[3].split("|")[1:-1]][-1].split("; ")  # the shared case misses none
    assert lines[5] == f"Targets missed over 2 case(s): {'; '.join(f'{t}: 1' for t in missed)}."
    cells = [c.strip() for c in lines[3].split("|")[1:-1]]
    assert cells[0].startswith("Oct 1-14, 88 GPUs") and len(cells) == 10
    assert cells[7] == "-"  # no sessions in these cases
    assert float(cells[2]) > 0 and len(cells[3].split(" / ")) == 3  # impact, and where the rest of it went
    # the demand of 60 jobs on a 128-GPU cluster for 14 days is small: every job starts, no target is missed
    assert lines[2].endswith("| none |")
    with pytest.raises(SystemExit):
        bars.main(["--cases", "nope"])


def test_the_bars_script_replays_chosen_policies_several_cases_at_a_time(tmp_path, capsys):
    """``--policies budget,static-priority --jobs 2``: the cases replayed two at a time, each in a process of its
    own, give the rows that one by one gives, in the same order; the baselines not replayed are not compared with,
    and ``--json`` keeps every case's report."""
    philly = _small_philly(tmp_path)
    bars = _example("bars")
    common = ["--cases", "shared,oct1-11x8,typed-88", "--philly", str(philly), "--policies", "budget,static-priority"]
    assert bars.main([*common, "--jobs", "2", "--json", str(tmp_path / "r.json")]) == 0
    two_at_a_time = capsys.readouterr().out.splitlines()
    assert bars.main([*common, "--workers", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == two_at_a_time
    cells = [c.strip() for c in two_at_a_time[2].split("|")[1:-1]]
    assert cells[0].startswith("Oct 1-14, 16x8 (the shared case)") and cells[5].endswith("(static-priority)")
    reports = json.loads((tmp_path / "r.json").read_text())
    assert list(reports) == ["shared", "oct1-11x8", "typed-88"]
    assert all(set(r["policies"]) == {"budget", "static-priority"} for r in reports.values())
    with pytest.raises(SystemExit, match="shared: simulate exited with 2: .*missing.csv"):  # and none left running
        bars.main(["--cases", "shared,sep15", "--philly", str(tmp_path / "missing.csv"), "--jobs", "2"])
    for bad in (["--policies", "fifo-backfill"], ["--jobs", "0"], ["--compare", str(tmp_path / "none.json")]):
        with pytest.raises(SystemExit):
            bars.main(["--cases", "shared", *bad])
    # --compare: the same code gives the same budget figures, whatever else was replayed beside it
    assert bars.main([*common[:4], "--policies", "budget", "--compare", str(tmp_path / "r.json")]) == 0
    assert ("3 case(s) compared, 3 unchanged, 0 newly missing a target, 0 newly meeting one; mean change: impact "
            "+0.000 points") in capsys.readouterr().out
    changed = json.loads(json.dumps(reports))
    m = changed["oct1-11x8"]["policies"]["budget"]
    m["impact"] -= 0.02 * m["impact_ceiling"]
    lines = bars.compare(reports, changed)
    row = next(line for line in lines if line.startswith("| oct1-11x8 "))
    old_impact = reports["oct1-11x8"]["policies"]["budget"]["impact"] / m["impact_ceiling"]
    assert row.startswith(f"| oct1-11x8 | {old_impact:.4f} -> {old_impact - 0.02:.4f} |")
    assert lines[-1].startswith("3 case(s) compared, 2 unchanged, ")
    assert lines[-1].endswith("mean change: impact -0.667 points, preempted batch jobs +0.000 points.")
    # a verdict that changes is named: 0.90 of its ceiling is below static-priority's impact on this case
    m["impact"] = 0.9 * m["impact_ceiling"]
    row = next(line for line in bars.compare(reports, changed) if line.startswith("| oct1-11x8 "))
    assert row.endswith("| impact above every baseline's / - |")
    assert bars.compare(changed, reports)[-1].startswith("3 case(s) compared, 2 unchanged, 0 newly missing a "
                                                         "target, 1 newly meeting one;")
    assert bars.compare({}, changed) == ["No case in common with the earlier run."]


def test_the_bars_script_passes_more_simulate_options_to_every_case_and_keeps_its_own(tmp_path, capsys):
    """``--simulate "OPTIONS"``: a what-if on the same cases, one by one or several at a time (here a debug stream on
    cases without one: their reports then count sessions, and the debug p95 column is filled); an option the script
    sets itself is refused before anything is replayed."""
    philly = _small_philly(tmp_path, ((8, "6214e9"), (1, "b436b2")))
    bars = _example("bars")
    common = ["--cases", "shared,oct1-11x8", "--philly", str(philly), "--policies", "budget"]
    assert bars.main([*common, "--workers", "1", "--json", str(tmp_path / "plain.json")]) == 0
    assert all(line.split("|")[8].strip() == "-" for line in capsys.readouterr().out.splitlines()[2:4])
    for how in (["--workers", "1"], ["--jobs", "2"]):
        out = tmp_path / f"what-if{len(how[0])}.json"
        assert bars.main([*common, *how, "--simulate", "--debug-rate 4 --debug-pool 1", "--json", str(out)]) == 0
        table = capsys.readouterr().out.splitlines()
        assert all(line.split("|")[8].strip() != "-" for line in table[2:4])
        reports = json.loads(out.read_text())
        assert all(r["policies"]["budget"]["debug_sessions"] > 0 for r in reports.values())
    assert bars.simulate_argv("shared", bars.CASES["shared"], tmp_path, 0, None, out, extra=("--x", "1"))[-2:] == [
        "--x", "1"]
    for own in ("--seed 3", "--nodes=4x8:H100", "--pol all", "--json out.json"):
        with pytest.raises(SystemExit):
            bars.main([*common, "--simulate", f"--debug-rate 4 {own}"])
    assert "is set by this script" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # an unclosed quote
        bars.main([*common, "--simulate", '--debug-rate "4'])


def test_the_bars_script_writes_a_synthetic_labs_inputs_and_lists_it_apart(tmp_path, capsys):
    bars = _example("bars")
    case = bars.Case("tiny lab", "", NODES, synthetic=("--seed", "5"))
    argv = bars.inputs("tiny", case, tmp_path)
    trace, budgets = argv[argv.index("--trace") + 1], argv[argv.index("--budgets") + 1]
    b = load_budgets(budgets)
    jobs = load_trace(trace, b.grant)
    assert len({j.team for j in jobs}) == 13 and max(j.submit_s for j in jobs) < 14 * 86400
    assert bars.main(["--list"]) == 0
    listed = capsys.readouterr().out.split()
    assert {"shared", "lab2", "helios-1024"} <= set(listed)
    assert set(bars.LABS).isdisjoint(bars.CASES)  # "all" is the Philly cases; "labs" runs the labs
    assert {"random0", "random23"} <= set(listed)


def test_the_many_team_labs_replay_three_days_of_their_trace(tmp_path, capsys):
    """``--cases teams``: the labs of 100 and 150 teams (docs/policy.md, Known gaps) replay the first 3 days of a
    14-day trace, as the docs measure them; every other case replays 14 days."""
    bars = _example("bars")
    assert bars.main(["--list"]) == 0
    assert {"teams-150", "teams-100"} <= set(capsys.readouterr().out.split())
    case = bars.Case("tiny lab, 3 days", "", NODES, synthetic=("--seed", "5", "--teams", "30"), days=3)
    out = tmp_path / "r.json"
    argv = bars.simulate_argv("tiny", case, tmp_path, 0, None, out)
    assert argv[argv.index("--days") + 1] == "3" and argv[argv.index("--json") + 1] == str(out)
    jobs = load_trace(argv[argv.index("--trace") + 1], load_budgets(argv[argv.index("--budgets") + 1]).grant)
    assert max(j.submit_s for j in jobs) > 13 * 86400 and len({j.team for j in jobs}) == 30
    argv = bars.simulate_argv("shared", bars.CASES["shared"], tmp_path, 0, None, out)
    assert argv[argv.index("--days") + 1] == "14"
    assert [bars.TEAMS[n].days for n in ("teams-150", "teams-100")] == [3, 3]
    assert {bars.TEAMS[n].synthetic[bars.TEAMS[n].synthetic.index("--teams") + 1] for n in bars.TEAMS} == {"150", "100"}


def test_the_sessions_cases_are_the_philly_windows_again_with_the_debug_stream(capsys):
    """``--cases sessions``: every 16 x 8 window of the Philly cases replayed again with ``--debug-rate 4``, beside
    the cases that already have sessions; each one the same window (start, nodes, budgets) as its case without."""
    bars = _example("bars")
    assert all(case.debug_rate == 4 for case in bars.SESSIONS.values())
    for name, case in bars.SESSIONS.items():
        if name not in bars.CASES:
            plain = bars.CASES[name.removesuffix("-debug")]
            same = ("start", "nodes", "scale", "typed", "shared_budgets")
            assert [getattr(case, f) for f in same] == [getattr(plain, f) for f in same]
            assert plain.debug_rate == 0 and case.label.startswith(plain.label)
    assert {"shared-debug", "sep22-debug", "oct17-debug", "groups-oct1-debug"} <= set(bars.SESSIONS)
    assert bars.main(["--list"]) == 0
    listed = {line.split()[0] for line in capsys.readouterr().out.splitlines()}
    assert set(bars.SESSIONS) <= listed
    with pytest.raises(SystemExit):  # the group's name is known, a misspelling is not
        bars.main(["--cases", "session"])


def test_the_random_labs_are_drawn_the_same_every_time_and_vary_every_knob():
    bars = _example("bars")
    again = {name: bars.random_lab(int(name.removeprefix("random"))) for name in bars.RANDOM}
    assert again == bars.RANDOM
    labs = list(bars.RANDOM.values())
    assert len({c.nodes for c in labs}) >= 4 and {c.debug_rate for c in labs} == {0, 4}
    assert any("--no-debug" in c.synthetic for c in labs) and any("--debug-share" in c.synthetic for c in labs)
    assert any("--teams" in c.synthetic for c in labs) and all(c.synthetic.count("--seed") == 1 for c in labs)


def test_shorter_runs_give_more_jobs_for_the_same_demand_and_the_session_share_is_an_option(tmp_path):
    """``--median-run-hours``: Philly's minutes instead of hours; the demand is the same, so the jobs multiply, and
    with them the sessions unless ``--debug-share`` is lowered."""
    hours, _, _ = _write(tmp_path, "hours")
    minutes, _, _ = _write(tmp_path, "minutes", "--median-run-hours", "0.25")
    fewer, _, _ = _write(tmp_path, "fewer", "--median-run-hours", "0.25", "--debug-share", "0.03")
    assert len(minutes) > 3 * len(hours)
    sessions = [sum(1 for j in jobs if j.kind == "debug") for jobs in (hours, minutes, fewer)]
    assert sessions[1] > 2 * sessions[0] and sessions[2] < sessions[1] / 2
    for bad in (["--median-run-hours", "0"], ["--debug-share", "0.9"]):
        with pytest.raises(SystemExit):
            _synthetic().main([*bad, "--trace", str(tmp_path / "x.csv"), "--budgets", str(tmp_path / "y.csv")])


def test_the_lab_may_have_any_number_of_teams(tmp_path):
    jobs, budgets, _ = _write(tmp_path, "many", "--teams", "25", "--no-debug")
    assert len(budgets.leaves()) == 25 and {j.team for j in jobs} <= set(budgets.leaves())
    assert {t.split("/")[1] for t in budgets.leaves()} == {"vision", "nlp", "sys", "sci"}
    with pytest.raises(SystemExit):
        _synthetic().main(["--teams", "0", "--trace", str(tmp_path / "x.csv"), "--budgets", str(tmp_path / "y.csv")])


def test_the_bars_row_says_what_whole_jobs_allow_where_it_is_below_the_bar():
    bars = _example("bars")
    m = {"impact": 0.8, "impact_ceiling": 1.0, "occupancy": 1.0, "occupancy_ceiling": 1.0, "wait_p95_s": 3600.0,
         "preempted_batch_jobs": 0, "started_batch_jobs": 10}
    case = bars.Case("a lab", "", "1x8:H100")
    for reachable, shown in ((0.9, "0.800 (whole jobs: at most 0.900)"), (0.9495, "0.800 (whole jobs: at most 0.9495)"),
                             (0.96, "0.800"), (None, "0.800")):
        extra = {} if reachable is None else {"impact_ceiling_whole_jobs": reachable}
        cells = bars.row(case, {"demand_ratio": 2.0, "policies": {"budget": {**m, **extra}}}, []).split(" | ")
        assert cells[2] == shown
