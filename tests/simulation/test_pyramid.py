"""The pyramid formulas of DESIGN.md §5 on hand-computed cases."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.pyramid import (
    PyramidAccumulator,
    Sample,
    TeamSample,
    TeamTree,
    apportion,
    censored_waits,
    demand_ratio,
    entitled,
    percentile,
    pyramid,
    wait_percentiles,
    water_fill,
)

TREE = TeamTree(
    parent={"lab": None, "lab/a": "lab", "lab/a/x": "lab/a", "lab/a/y": "lab/a", "lab/b": "lab"},
    grant={"lab": 1000, "lab/a": 600, "lab/a/x": 300, "lab/a/y": 300, "lab/b": 400},
)


def test_water_fill_redistributes_what_a_claimant_does_not_want():
    # weights 1:1:2, the second wants only 1: the other 9 are split 1:2.
    assert water_fill(10, [1, 1, 2], [100, 1, 100]) == pytest.approx([3, 1, 6])
    # everyone capped: each gets its cap, the rest stays unallocated.
    assert water_fill(10, [1, 1], [2, 3]) == pytest.approx([2, 3])
    # zero weight gets only what the positive weights leave.
    assert water_fill(10, [1, 0], [4, 100]) == pytest.approx([4, 6])
    # ... and nothing while they want it all; nothing to split, or no one to split it among, gives nothing
    assert water_fill(10, [1, 0], [20, 100]) == pytest.approx([10, 0])
    assert water_fill(0, [1, 1], [5, 5]) == [0.0, 0.0] and water_fill(5, [], []) == []
    assert water_fill(10, [1, 1], [0, 20]) == pytest.approx([0, 10])


def test_entitled_is_hierarchical_water_filling():
    e = entitled(TREE, 10, {"lab/a/x": 1, "lab/a/y": 10, "lab/b": 10})
    # top: a (600) gets 6, b (400) gets 4; inside a, x wants 1 so y gets 5.
    assert e == pytest.approx({"lab/a/x": 1, "lab/a/y": 5, "lab/b": 4})
    # b wants only 1: its share goes up to a and down to y.
    e = entitled(TREE, 10, {"lab/a/x": 1, "lab/a/y": 10, "lab/b": 1})
    assert e == pytest.approx({"lab/a/x": 1, "lab/a/y": 8, "lab/b": 1})
    # demand below capacity: everyone gets what it asks.
    assert entitled(TREE, 10, {"lab/a/x": 2, "lab/b": 3}) == pytest.approx({"lab/a/x": 2, "lab/b": 3})


def test_entitled_gives_a_parent_its_unsplit_remainder():
    tree = TeamTree(parent={"lab": None, "lab/a": "lab"}, grant={"lab": 1000, "lab/a": 600})
    assert entitled(tree, 10, {"lab": 10, "lab/a": 10}) == pytest.approx({"lab": 4, "lab/a": 6})


def test_entitled_gives_a_parent_that_split_its_whole_grant_nothing_for_its_own_work_while_its_children_want_it():
    """lab/a split all of its 600 between x and y: the jobs lab/a runs as its own get a GPU only once neither
    child wants the rest."""
    tree = TeamTree(parent={"lab": None, "lab/a": "lab", "lab/a/x": "lab/a", "lab/a/y": "lab/a"},
                    grant={"lab": 600, "lab/a": 600, "lab/a/x": 300, "lab/a/y": 300})
    assert entitled(tree, 6, {"lab/a": 4, "lab/a/x": 10, "lab/a/y": 10}) == pytest.approx(
        {"lab/a": 0, "lab/a/x": 3, "lab/a/y": 3})
    assert entitled(tree, 6, {"lab/a": 4, "lab/a/x": 1, "lab/a/y": 2}) == pytest.approx(
        {"lab/a": 3, "lab/a/x": 1, "lab/a/y": 2})


def test_apportion_floors_then_largest_remainders():
    assert apportion({"a": 2 / 3, "b": 2 / 3, "c": 2 / 3}, 2) == {"a": 1, "b": 1, "c": 0}
    assert apportion({"a": 4.8, "b": 3.2}, 8) == {"a": 5, "b": 3}
    assert apportion({"a": 2.0, "b": 1.0}, 8) == {"a": 2, "b": 1}


def test_impact_ceiling_below_one_with_many_small_teams_on_few_gpus():
    tree = TeamTree(parent={"t1": None, "t2": None, "t3": None}, grant={"t1": 1, "t2": 1, "t3": 1})
    teams = {t: TeamSample(demand=1, allocated=1 if t != "t3" else 0) for t in ("t1", "t2", "t3")}
    m = pyramid(tree, [Sample(60, 2, 2, teams)])
    # e = 2/3 each; whole GPUs reach at best 2/3 + 2/3 + 0 out of 2.
    assert m["impact_ceiling"] == pytest.approx(2 / 3)
    assert m["impact"] == pytest.approx(2 / 3)


def test_accumulator_on_two_hand_computed_intervals():
    tree = TeamTree(parent={"lab": None, "lab/a": "lab", "lab/b": "lab"}, grant={"lab": 10, "lab/a": 6, "lab/b": 4})
    s1 = Sample(10, 8, 8, {
        "lab/a": TeamSample(demand=8, allocated=4, used=2),
        "lab/b": TeamSample(demand=8, allocated=4, used=4),
    })
    # half the cluster is down; b is out of budget: no in-budget demand, 1 GPU of scavenger work.
    s2 = Sample(30, 4, 8, {
        "lab/a": TeamSample(demand=2, allocated=2, used=1),
        "lab/b": TeamSample(demand=0, allocated=0, scavenger=1, used=0, demand_all=1),
    })
    m = pyramid(tree, [s1, s2])
    assert m["availability"] == pytest.approx(200 / 320)
    assert m["occupancy"] == pytest.approx(170 / 200)
    assert m["occupancy_ceiling"] == pytest.approx((8 * 10 + 3 * 30) / 200)
    assert m["utilization"] == pytest.approx(90 / 170)
    # e1 = (4.8, 3.2): received min(4,4.8)+min(4,3.2) = 7.2 of 8; e2 = (2, 0): 2 of 2.
    assert m["impact"] == pytest.approx((7.2 * 10 + 2 * 30) / (8 * 10 + 2 * 30))
    # whole GPUs (5, 3): min(5,4.8)+min(3,3.2) = 7.8.
    assert m["impact_ceiling"] == pytest.approx((7.8 * 10 + 2 * 30) / 140)


def test_the_scavenger_work_of_every_out_of_budget_team_counts():
    """Two teams out of budget run 2 and 3 GPUs of scavenger work beside a's 4, while a waits for 6 more: 9 of 10
    healthy GPUs occupied, and of the 6 GPUs a went without, 5 went to out-of-budget work and 1 sat idle."""
    tree = TeamTree(parent={"lab": None, "lab/a": "lab", "lab/b": "lab", "lab/c": "lab"},
                    grant={"lab": 3, "lab/a": 1, "lab/b": 1, "lab/c": 1})
    acc = PyramidAccumulator(tree)
    acc.add(Sample(10, 10, 10, {"lab/a": TeamSample(demand=10, allocated=4, used=4),
                                "lab/b": TeamSample(scavenger=2, used=1, demand_all=2),
                                "lab/c": TeamSample(scavenger=3, used=3, demand_all=3)}))
    m = acc.result()
    assert m["occupancy"] == pytest.approx(0.9) and m["utilization"] == pytest.approx(8 / 9)
    assert m["impact"] == pytest.approx(0.4)
    assert acc.impact_loss() == pytest.approx({"impact_lost_over_share": 0.0, "impact_lost_out_of_budget": 0.5,
                                               "impact_lost_idle": 0.1})


def test_per_team_sums_split_impact_by_team():
    """The same two intervals, per team: b runs 4 GPUs where it is owed 3.2 and receives only those; the teams'
    sums are impact's numerator and denominator."""
    tree = TeamTree(parent={"lab": None, "lab/a": "lab", "lab/b": "lab"}, grant={"lab": 10, "lab/a": 6, "lab/b": 4})
    acc = PyramidAccumulator(tree, per_team=True)
    acc.add(Sample(10, 8, 8, {"lab/a": TeamSample(demand=8, allocated=4), "lab/b": TeamSample(demand=8, allocated=4)}))
    acc.add(Sample(30, 4, 8, {"lab/a": TeamSample(demand=2, allocated=2),
                              "lab/b": TeamSample(demand=0, scavenger=1, demand_all=1)}))
    assert acc.team_received == pytest.approx({"lab/a": 4 * 10 + 2 * 30, "lab/b": 3.2 * 10})
    assert acc.team_wanted == pytest.approx({"lab/a": 4.8 * 10 + 2 * 30, "lab/b": 3.2 * 10})
    assert sum(acc.team_received.values()) == pytest.approx(acc.received)
    assert sum(acc.team_wanted.values()) == pytest.approx(acc.wanted)
    assert PyramidAccumulator(tree).team_received is None  # kept only when asked for


def test_accumulator_order_free_and_zero_denominators():
    tree = TeamTree(parent={"a": None}, grant={"a": 1})
    acc = PyramidAccumulator(tree)
    acc.add(Sample(10, 0, 8, {}))
    m = acc.result()
    assert m["availability"] == 0.0 and m["occupancy"] is None and m["impact"] is None


def test_waits_are_censored_at_the_window_end_never_dropped():
    jobs = [(0, 10), (5, None), (20, 20)]
    assert censored_waits(jobs, 100) == [10, 95, 0]
    p50, p95 = wait_percentiles(jobs, 100)
    assert p50 == 10
    assert p95 == pytest.approx(10 + 0.9 * 85)
    assert percentile([], 50) is None
    # a job started after the window counts as not started.
    assert censored_waits([(0, 150)], 100) == [100]


def test_percentiles_interpolate_between_the_closest_ranks():
    """The p95 of two waits lies between them; of four, the median is halfway between the middle two; the
    100th percentile is the longest wait (as numpy's default, linear, method)."""
    assert percentile([7.0], 95) == 7.0
    assert percentile([10.0, 1.0], 95) == pytest.approx(9.55)
    assert percentile([0.0, 1.0, 2.0, 10.0], 50) == pytest.approx(1.5)
    assert percentile([0.0, 1.0, 2.0, 10.0], 100) == 10.0 and percentile([0.0, 1.0, 2.0, 10.0], 0) == 0.0


def test_demand_ratio_clips_each_job_at_the_window_end():
    assert demand_ratio([(0, 50, 2), (80, 50, 1), (120, 10, 8)], 4, 100) == pytest.approx((100 + 20) / 400)
    # a job that runs for no time, or is submitted as the window ends, demands nothing
    assert demand_ratio([(10, 0, 8), (100, 50, 8), (0, 0.5, 1)], 4, 100) == pytest.approx(0.5 / 400)


class _NoReuse(PyramidAccumulator):
    def _same_fill(self, healthy, demand):
        return False


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([6.0, 10.0]), st.lists(st.integers(0, 12), min_size=5, max_size=5),
                          st.lists(st.integers(0, 12), min_size=5, max_size=5)), min_size=1, max_size=30))
def test_reusing_the_last_water_fill_changes_no_figure(samples):
    """The accumulator reuses the last entitlements when the demand moved only where the water levels do not
    (docs/simulation.md): the report must be exactly that of a fresh water-fill per sample. Teams at every level
    of a nested tree (lab/a has its own work and children), demands often at or near the levels, so that both
    reuse and refusal happen."""
    teams = ["lab/a", "lab/a/x", "lab/a/y", "lab/b", "lab/c"]
    tree = TeamTree(parent={"lab": None, "lab/a": "lab", "lab/a/x": "lab/a", "lab/a/y": "lab/a", "lab/b": "lab",
                            "lab/c": "lab"},
                    grant={"lab": 1000, "lab/a": 600, "lab/a/x": 200, "lab/a/y": 300, "lab/b": 300, "lab/c": 100})
    fast, plain = PyramidAccumulator(tree), _NoReuse(tree)
    for healthy, demand, alloc in samples:
        sample = Sample(60.0, healthy, 10.0, {t: TeamSample(demand=float(d), allocated=float(min(a, d)))
                                              for t, d, a in zip(teams, demand, alloc)})
        fast.add(sample)
        plain.add(sample)
    assert fast.result() == plain.result()
    assert (fast.received, fast.wanted, fast.best) == (plain.received, plain.wanted, plain.best)


def test_impact_loss_says_where_the_gpus_owed_went():
    """10 GPUs, a and b entitled to 5 each (both want 8). a runs 7 (2 beyond its share), b runs 2, a spent team runs 1
    GPU of scavenger work and none is free: b goes without 3, given to a beyond its share (2) and to out-of-budget
    work (1). Then the spent work ends and the GPU stays free (b's 8-GPU job does not fit it): b goes without 3
    again, 2 to a and 1 left idle."""
    tree = TeamTree(parent={"lab": None, "lab/a": "lab", "lab/b": "lab", "lab/c": "lab"},
                    grant={"lab": 10, "lab/a": 5, "lab/b": 5, "lab/c": 0})
    acc = PyramidAccumulator(tree)
    acc.add(Sample(10, 10, 10, {"lab/a": TeamSample(demand=8, allocated=7), "lab/b": TeamSample(demand=8, allocated=2),
                                "lab/c": TeamSample(scavenger=1, demand_all=1)}))
    acc.add(Sample(10, 10, 10, {"lab/a": TeamSample(demand=8, allocated=7),
                                "lab/b": TeamSample(demand=8, allocated=2)}))
    loss = acc.impact_loss()
    assert loss == pytest.approx({"impact_lost_over_share": 40 / 200, "impact_lost_out_of_budget": 10 / 200,
                                  "impact_lost_idle": 10 / 200})
    assert acc.result()["impact"] + sum(loss.values()) == pytest.approx(1.0)


def test_impact_lost_over_share_sums_every_team_above_its_entitlement():
    """12 GPUs, three teams entitled to 4 each (all want 8): a runs 6 and b 5, so c, running 1, goes without 3: 2 of
    them to a beyond its share, 1 to b."""
    tree = TeamTree(parent={"lab": None, "lab/a": "lab", "lab/b": "lab", "lab/c": "lab"},
                    grant={"lab": 3, "lab/a": 1, "lab/b": 1, "lab/c": 1})
    acc = PyramidAccumulator(tree)
    acc.add(Sample(10, 12, 12, {"lab/a": TeamSample(demand=8, allocated=6), "lab/b": TeamSample(demand=8, allocated=5),
                                "lab/c": TeamSample(demand=8, allocated=1)}))
    assert acc.impact_loss() == pytest.approx({"impact_lost_over_share": 3 / 12, "impact_lost_out_of_budget": 0.0,
                                               "impact_lost_idle": 0.0})


def test_out_of_budget_work_on_gpus_nobody_in_budget_wants_costs_no_impact():
    """Demand below the capacity: a runs all it wants, and the spare GPUs run a spent team's work. Nothing is lost;
    when a then waits for 2 GPUs held by that work, those 2 count as lost to out-of-budget work."""
    tree = TeamTree(parent={"lab": None, "lab/a": "lab", "lab/c": "lab"}, grant={"lab": 10, "lab/a": 10, "lab/c": 0})
    acc = PyramidAccumulator(tree)
    acc.add(Sample(10, 10, 10, {"lab/a": TeamSample(demand=4, allocated=4), "lab/c": TeamSample(scavenger=6)}))
    assert acc.impact_loss() == {"impact_lost_over_share": 0.0, "impact_lost_out_of_budget": 0.0,
                                 "impact_lost_idle": 0.0}
    acc.add(Sample(10, 10, 10, {"lab/a": TeamSample(demand=6, allocated=4), "lab/c": TeamSample(scavenger=6)}))
    assert acc.impact_loss()["impact_lost_out_of_budget"] == pytest.approx(20 / 100)
    assert acc.impact_loss()["impact_lost_idle"] == pytest.approx(0.0)
    assert PyramidAccumulator(tree).impact_loss()["impact_lost_idle"] is None  # nothing wanted, nothing to split


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12),
                                                                 st.booleans()), min_size=5, max_size=5)),
                min_size=1, max_size=20))
def test_impact_and_its_losses_sum_to_one(samples):
    """Whatever the moment (saturated or not, teams above and below their shares, spent teams' work, idle GPUs),
    the three losses are never negative and, with impact, account for all of impact's denominator."""
    teams = ["lab/a", "lab/a/x", "lab/a/y", "lab/b", "lab/c"]
    tree = TeamTree(parent={"lab": None, "lab/a": "lab", "lab/a/x": "lab/a", "lab/a/y": "lab/a", "lab/b": "lab",
                            "lab/c": "lab"},
                    grant={"lab": 1000, "lab/a": 600, "lab/a/x": 200, "lab/a/y": 300, "lab/b": 300, "lab/c": 100})
    acc = PyramidAccumulator(tree)
    for healthy, rows in samples:
        room, figures = float(healthy), {}
        for team, (demand, run, spent) in zip(teams, rows):
            run = min(run, demand, room)  # a team runs at most what it asked for, on the GPUs there are
            room -= run
            figures[team] = (TeamSample(scavenger=float(run), demand_all=float(demand)) if spent else
                             TeamSample(demand=float(demand), allocated=float(run)))
        acc.add(Sample(60.0, float(healthy), 12.0, figures))
    m, loss = acc.result(), acc.impact_loss()
    if m["impact"] is None:
        assert set(loss.values()) == {None}
        return
    assert min(loss.values()) >= 0.0
    assert m["impact"] + sum(loss.values()) == pytest.approx(1.0)
