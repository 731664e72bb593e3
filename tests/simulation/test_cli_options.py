"""Any mix of ``simulate``'s options on a random small lab (nested teams, node groups of several sizes and types,
sessions in the trace and from the stream, time limits, failures, squatters): the command exits cleanly under all
four policies, every schedule it writes is sound, and every figure stays within its ceiling."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.simulation.check import check_schedule
from scheduling.simulation.cli import main
from scheduling.simulation.output import IMPACT_LOSS_KEYS
from scheduling.simulation.trace import DAY_S, parse_nodes

POLICIES = ("budget", "fifo-backfill", "static-priority", "quota-borrowing")  # issue #3's four


@st.composite
def labs(draw):
    """(node spec, budget rows, trace rows, extra options) of a valid small lab."""
    types = draw(st.sampled_from([[None], ["H100"], ["H100", "B200"]]))
    groups = draw(st.lists(st.tuples(st.integers(1, 3), st.sampled_from([1, 2, 4, 8]), st.sampled_from(types)),
                           min_size=1, max_size=3))
    nodes = ",".join(f"{n}x{g}" + (f":{t}" if t else "") for n, g, t in groups)
    node_count = sum(n for n, _, _ in groups)
    # a tree of teams: lab, two groups, a leaf under one of them; the root's grant at least its children's
    grants = draw(st.lists(st.sampled_from([0.5, 5, 50, 500]), min_size=3, max_size=3))
    budgets = [("lab", sum(grants) + draw(st.sampled_from([0, 10]))), ("lab/a", grants[0] + grants[2]),
               ("lab/b", grants[1]), ("lab/a/x", grants[2])]
    teams = [t for t, _ in budgets]
    typed = sorted({t for _, _, t in groups if t})
    job = st.tuples(
        st.floats(0, 0.9 * DAY_S), st.sampled_from(teams), st.sampled_from([1, 1, 2, 3, 4, 8, 12, 16, 64]),
        st.sampled_from([30.0, 600.0, 3600.0, 5 * 3600.0]), st.sampled_from([None, *typed]),
        st.sampled_from(["train", "train", "debug", "eval"]), st.sampled_from(["", "0.0", "0.7"]),
        st.sampled_from([None, 0.5, 2.0]))
    rows = draw(st.lists(job, min_size=1, max_size=30))
    opts: list[str] = []
    for flag, values in (("--debug-rate", ["1", "8"]), ("--mtbf-hours", ["3"]), ("--checkpoint-minutes", ["20"]),
                         ("--checkpoint-save-seconds", ["0", "30"]), ("--squatters", ["2"]),
                         ("--debug-forget", ["0.5"]), ("--debug-sessions-per-user", ["1"]),
                         ("--debug-sessions-per-team", ["1"]), ("--reclaim-after-gpu-hours", ["0", "4"]),
                         ("--debug-pool", [str(min(node_count, 2))]), ("--debug-headroom", ["0", "8"])):
        value = draw(st.sampled_from([None, *values]))
        if value is not None:
            opts += [flag, value] + (["--repair-hours", "1"] if flag == "--mtbf-hours" else [])
    for flag in ("--no-gang-turns", "--no-guaranteed-first", "--static-preempt", "--explain"):
        if draw(st.booleans()):
            opts.append(flag)
    return nodes, budgets, rows, opts


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lab=labs(), seed=st.integers(0, 100))
def test_any_mix_of_options_replays_cleanly_with_sound_schedules(lab, seed, tmp_path):
    nodes, budgets, rows, opts = lab
    run = tmp_path / uuid.uuid4().hex
    run.mkdir()
    (run / "budgets.csv").write_text("team,gpu_hours\n" + "".join(f"{t},{g}\n" for t, g in budgets))
    trace = ["job_id,submit_s,team,user,gpus,duration_s,gpu_type,kind,utilization,time_limit_s"]
    for i, (submit, team, gpus, duration, gtype, kind, util, limit) in enumerate(rows):
        trace.append(f"j{i},{submit:.1f},{team},u{i % 3},{gpus},{duration},{gtype or ''},{kind},{util},"
                     + (f"{duration * limit:.0f}" if limit else ""))
    (run / "trace.csv").write_text("\n".join(trace) + "\n")
    argv = ["simulate", "--trace", str(run / "trace.csv"), "--nodes", nodes, "--budgets", str(run / "budgets.csv"),
            "--days", "1", "--policy", "all", "--seed", str(seed), "--workers", "1", "--no-progress",
            "--json", str(run / "r.json"), "--schedule", str(run / "s"), "--teams-csv", str(run / "teams.csv"),
            "--timeline", str(run / "timeline.csv"), *opts]

    assert main(argv) == 0
    report = json.loads((run / "r.json").read_text())
    assert set(report["policies"]) == set(POLICIES)
    for name, m in report["policies"].items():
        assert check_schedule(str(run / "s" / f"{name}.csv"), parse_nodes(nodes)) == [], name
        assert 0 <= m["availability"] <= 1
        assert m["occupancy"] <= m["occupancy_ceiling"] + 1e-9
        if m["impact"] is not None:
            assert m["impact"] <= m["impact_ceiling"] + 1e-9
            assert m["impact"] + sum(m[k] for k in IMPACT_LOSS_KEYS) == pytest.approx(1.0, abs=1e-6)
        assert m["completed_jobs"] + m["never_started"] <= m["jobs"]
        if "--explain" in opts:
            idle = m["occupancy_idle_by_place"]
            assert sum(idle.values()) == pytest.approx(1 - m["occupancy"], abs=1e-6)
    assert (run / "teams.csv").stat().st_size > 0 and (run / "timeline.csv").stat().st_size > 0
