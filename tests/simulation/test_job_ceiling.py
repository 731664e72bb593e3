"""The impact ceiling of whole jobs (scheduling/job_ceiling.py): never above DESIGN's Hamilton ceiling, never below
what the best choice of whole jobs reaches, and equal to DESIGN's when every job asks for one GPU."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.job_ceiling import reach, whole_job_best
from scheduling.pyramid import PyramidAccumulator, Sample, TeamSample, TeamTree, apportion
from scheduling.simulation.output import shown_at_most


def _hamilton_best(e: dict[str, float], total: int) -> float:
    a = apportion(e, total)
    return sum(min(a[t], e[t]) for t in e)


def _sums(sizes: tuple) -> set[int]:
    """Every sum of GPUs some choice of a team's jobs gives (jobs of one size differ only in how many are chosen)."""
    return {sum(g * k for (g, _), k in zip(sizes, counts))
            for counts in itertools.product(*(range(n + 1) for _, n in sizes))}


def _exact_best(e: dict[str, float], sizes: dict[str, tuple], total: int) -> float:
    """Every choice of whole jobs, tried."""
    sums = [_sums(sizes[team]) for team in e]
    teams = list(e)
    return max(sum(min(x, e[t]) for x, t in zip(xs, teams))
               for xs in itertools.product(*sums) if sum(xs) <= total)


def test_a_team_whose_every_job_is_larger_than_its_share_gets_its_share_only_at_the_others_expense():
    # 8 GPUs; a is entitled to 5.5 but asks only for jobs of 8, b to 2.5 with jobs of one GPU. DESIGN's ceiling
    # gives a 6 whole GPUs and b 2 (worth 5.5 + 2); with whole jobs a runs 8 GPUs (worth 5.5) or b runs 3 (worth
    # 2.5), never both.
    e = {"a": 5.5, "b": 2.5}
    sizes = {"a": ((8, 2),), "b": ((1, 3),)}
    assert _hamilton_best(e, 8) == pytest.approx(7.5)
    assert whole_job_best(e, sizes, 8) == pytest.approx(5.5) == _exact_best(e, sizes, 8)


def test_the_largest_and_smallest_sums_around_a_share():
    assert reach(((1, 10),), 3.5) == (3, 4)
    assert reach(((8, 2),), 5.5) == (0, 8)
    assert reach(((2, 1), (8, 1)), 5.5) == (2, 8)
    assert reach(((3, 2),), 6.0) == (6, 6)
    assert reach(((4, 1),), 5.0) == (4, None)  # (e never exceeds demand; a team asking less has no sum above it)
    assert reach(((1, 1), (8, 1)), 5.2) == (1, 8)  # one job of one GPU is not enough to reach 6
    assert reach(((1, 5), (8, 1)), 5.5) == (5, 8)  # nor are five


def test_an_accumulated_replay_reports_both_ceilings():
    tree = TeamTree(parent={"lab": None, "lab/a": "lab", "lab/b": "lab"},
                    grant={"lab": 8, "lab/a": 5.5, "lab/b": 2.5})
    acc = PyramidAccumulator(tree, whole_jobs=True)
    lumpy = {"lab/a": TeamSample(demand=16, allocated=8, sizes=((8, 2),)),
             "lab/b": TeamSample(demand=3, sizes=((1, 3),))}
    acc.add(Sample(10.0, 8, 8, lumpy))
    # the same demand with sizes unknown counts as jobs of one GPU: the ceilings agree
    acc.add(Sample(10.0, 8, 8, {t: TeamSample(demand=s.demand, allocated=s.allocated) for t, s in lumpy.items()}))
    m = acc.result()
    assert m["impact_ceiling"] == pytest.approx(7.5 / 8)
    assert m["impact_ceiling_whole_jobs"] == pytest.approx((5.5 + 7.5) / 16)
    assert m["impact"] == pytest.approx(5.5 / 8)
    assert "impact_ceiling_whole_jobs" not in PyramidAccumulator(tree).result()  # (a knapsack a sample: on request)


def test_what_whole_jobs_allow_is_shown_rounded_up_and_never_as_the_bar():
    assert shown_at_most(0.9001, 0.95) == "0.901" and shown_at_most(0.1 * 3 / 100, 0.95) == "0.003"
    assert shown_at_most(0.94951, 0.95) == "0.9496"  # not "0.950", which would read as reaching the bar


_teams = st.lists(
    st.tuples(st.floats(0.1, 12.0), st.lists(st.tuples(st.sampled_from([1, 2, 3, 4, 8]), st.integers(1, 3)),
                                             min_size=1, max_size=2, unique_by=lambda p: p[0])),
    min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(_teams, st.integers(1, 24))
def test_the_ceiling_of_whole_jobs_lies_between_the_best_choice_of_jobs_and_the_hamilton_ceiling(teams, capacity):
    e, sizes = {}, {}
    for k, (share, jobs) in enumerate(teams):
        jobs = tuple(sorted(jobs))
        demand = sum(g * n for g, n in jobs)
        e[f"t{k}"] = min(share, demand)  # an entitlement never exceeds its team's demand
        sizes[f"t{k}"] = jobs
    scale = min(1.0, capacity / sum(e.values()))  # nor do the entitlements exceed the capacity
    e = {t: v * scale for t, v in e.items()}
    total = min(capacity, round(sum(e.values())))
    hamilton = _hamilton_best(e, total)
    mine = whole_job_best(e, sizes, total)
    assert _exact_best(e, sizes, total) <= min(mine, hamilton) + 1e-9
    ones = {t: ((1, math.ceil(v - 1e-9) + 1),) for t, v in e.items()}
    assert whole_job_best(e, ones, total) == pytest.approx(hamilton)


def test_a_replay_of_jobs_larger_than_their_teams_shares_says_what_whole_jobs_allow(tmp_path, capsys):
    from scheduling.simulation.cli import main

    trace, budgets, out = tmp_path / "t.csv", tmp_path / "b.csv", tmp_path / "r.json"
    rows = ["job_id,submit_s,team,gpus,duration_s"]
    # jobs of ten days and budgets that last: the same demand all day
    rows += [f"a{k},0,lab/a,8,864000" for k in range(3)] + [f"b{k},0,lab/b,1,864000" for k in range(9)]
    trace.write_text("\n".join(rows) + "\n")
    budgets.write_text("team,gpu_hours\nlab,80000\nlab/a,55000\nlab/b,25000\n")
    assert main(["simulate", "--trace", str(trace), "--budgets", str(budgets), "--nodes", "1x8:H100", "--days", "1",
                 "--policy", "budget,fifo-backfill", "--json", str(out), "--no-progress", "--explain",
                 "--workers", "1"]) == 0
    pols = json.loads(out.read_text())["policies"]
    m = pols["budget"]
    # every policy's replay has it (its own demand, its own ceiling)
    assert pols["fifo-backfill"]["impact"] <= pols["fifo-backfill"]["impact_ceiling_whole_jobs"] + 1e-9
    # a (5.5 of the 8 GPUs) runs 8 or nothing: at most 5.5 of the 8 entitled GPUs, where DESIGN's ceiling has 7.5
    assert m["impact_ceiling"] == pytest.approx(7.5 / 8, abs=0.01)
    assert m["impact_ceiling_whole_jobs"] == pytest.approx(5.5 / 8, abs=0.01)
    assert m["impact"] <= m["impact_ceiling_whole_jobs"] + 1e-9
    impact_target = next(t for t in json.loads(out.read_text())["targets"] if t["target"] == "impact")
    assert impact_target["reachable"] == m["impact_ceiling_whole_jobs"] / m["impact_ceiling"]
    line = next(x for x in capsys.readouterr().out.splitlines() if "impact >= 0.95 of its ceiling" in x)
    reachable = m["impact_ceiling_whole_jobs"] / m["impact_ceiling"]
    assert f"(whole jobs allow at most {math.ceil(reachable * 1000) / 1000:.3f})" in line and line.endswith("NOT MET")


_sizes = st.lists(st.tuples(st.sampled_from([1, 2, 3, 5, 8, 16]), st.integers(1, 9)), min_size=1, max_size=3,
                  unique_by=lambda p: p[0]).map(lambda js: tuple(sorted(js)))


@settings(max_examples=300, deadline=None)
@given(_sizes, st.floats(0.0, 60.0))
def test_the_sums_around_a_share_are_the_nearest_sums_of_whole_jobs(sizes, e):
    """``reach``'s bit-set of subset sums (counts split in powers of two) against every choice of jobs."""
    sums = _sums(sizes)
    floor, ceil = math.floor(e + 1e-9), math.ceil(e - 1e-9)
    above = [s for s in sums if s >= ceil]
    assert reach(sizes, e) == (max(s for s in sums if s <= floor), min(above) if above else None)


def _relaxed_best(e: dict[str, float], sizes: dict[str, tuple], total: int) -> float:
    """The module docstring's relaxation by brute force: each team at ``lo`` or upgraded to ``hi``; the GPUs the
    upgrades take beyond the free ones cost one each."""
    ups, used = [], 0
    for t, v in e.items():
        lo, hi = reach(sizes[t], v)
        used += lo
        if hi is not None and v - lo > 1e-9:
            ups.append((hi - lo, v - lo))
    slack = max(0, total - used)
    return used + max(sum(g for _, g in pick) - max(0, sum(c for c, _ in pick) - slack)
                      for k in range(len(ups) + 1) for pick in itertools.combinations(ups, k))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 20.0), _sizes), min_size=1, max_size=6), st.integers(1, 48), st.booleans())
def test_the_ceiling_of_whole_jobs_is_the_best_of_its_relaxation(teams, capacity, rounded):
    """The knapsack over the upgrades (by GPUs taken, one-GPU upgrades by gain) finds the relaxation's optimum, for
    the GPUs the pyramid offers (the entitlements' sum, rounded) and for more (where every upgrade may fit)."""
    e = {f"t{k}": min(share, sum(g * n for g, n in sizes)) for k, (share, sizes) in enumerate(teams)}
    scale = min(1.0, capacity / sum(e.values()))
    e = {t: v * scale for t, v in e.items()}
    sizes = {f"t{k}": s for k, (_, s) in enumerate(teams)}
    total = min(capacity, round(sum(e.values()))) if rounded else capacity
    assert whole_job_best(e, sizes, total) == pytest.approx(_relaxed_best(e, sizes, total))


def test_a_team_without_sizes_counts_as_jobs_of_one_gpu_and_room_for_every_upgrade_gives_every_entitlement():
    e = {"ones": 3.0, "half": 2.5, "lumpy": 2.5}
    sizes = {"lumpy": ((4, 1),)}  # the others: jobs of one GPU, as many as they are entitled to
    assert whole_job_best(e, sizes, 10) == pytest.approx(8.0)  # 3 + 3 (worth 2.5) + 4 (worth 2.5) fit in 10
    # in 6: 3 + 3 (worth 5.5); the 4-GPU job instead of half's third GPU takes 3 GPUs beyond the free one (4.5)
    assert whole_job_best(e, sizes, 6) == pytest.approx(5.5)
    assert whole_job_best({"ones": 3.0}, {}, 3) == pytest.approx(3.0)  # an entitlement of whole GPUs, reached
