"""Stories about who gets the free GPUs: hierarchical shares from budgets, ordering, standing updates."""

from hypothesis import example, given, settings
from hypothesis import strategies as st
from tests.policy.policy_builders import (
    HOUR,
    NOW,
    check_plan,
    flat_teams,
    nodes,
    pend,
    preempts,
    run,
    snap,
    starts,
    team_of_start,
)

from scheduling.policy import BudgetPolicy, TeamState
from scheduling.policy.fairshare import FairOrder, TeamTree, water_fill

policy = BudgetPolicy()


def many(team: str, n: int, gpus: int = 1, prefix: str | None = None, **kw):
    prefix = prefix or team.split("/")[-1]
    return [pend(f"{prefix}{i:03d}", team, gpus, **kw) for i in range(n)]


def test_free_gpus_split_by_budget_grants():
    """Two teams with 3:1 grants and plenty of work share an empty 16-GPU cluster 12:4."""
    s = snap(nodes(2), flat_teams({"a": 300, "b": 100}), pending=many("lab/a", 30) + many("lab/b", 30))
    plan = policy.plan(s)
    check_plan(s, plan)
    assert team_of_start(s, plan) == {"lab/a": 12, "lab/b": 4}


def test_share_of_a_team_that_wants_less_goes_to_the_others():
    """Team a wants only 2 GPUs: the rest of its share goes to b and c (max-min, DESIGN §5 'redistributed')."""
    s = snap(nodes(2), flat_teams({"a": 1, "b": 1, "c": 2}),
             pending=many("lab/a", 2) + many("lab/b", 30) + many("lab/c", 30))
    plan = policy.plan(s)
    assert team_of_start(s, plan) == {"lab/a": 2, "lab/b": 5, "lab/c": 9}


def test_shares_multiply_down_the_tree():
    """lab/a (grant 1, split x:y = 1:1) vs lab/b (grant 1): b gets half, x and y a quarter each."""
    teams = (TeamState("lab", None, 2), TeamState("lab/a", "lab", 1), TeamState("lab/b", "lab", 1),
             TeamState("lab/a/x", "lab/a", 0.5), TeamState("lab/a/y", "lab/a", 0.5))
    s = snap(nodes(2), teams, pending=many("lab/a/x", 20) + many("lab/a/y", 20) + many("lab/b", 20))
    plan = policy.plan(s)
    assert team_of_start(s, plan) == {"lab/b": 8, "lab/a/x": 4, "lab/a/y": 4}


def test_parent_members_share_the_unsplit_remainder():
    """lab/a keeps 3 of its 4 GPU-hours unsplit for its own members: a's own jobs get 3x its child x."""
    teams = (TeamState("lab", None, 4), TeamState("lab/a", "lab", 4), TeamState("lab/a/x", "lab/a", 1))
    s = snap(nodes(1), teams, pending=many("lab/a", 20) + many("lab/a/x", 20))
    plan = policy.plan(s)
    assert team_of_start(s, plan) == {"lab/a": 6, "lab/a/x": 2}


def test_what_a_team_runs_now_counts():
    """Equal budgets, a already runs 6 of 8 GPUs: both free GPUs go to b."""
    running = [run(f"r{i}", "lab/a", [("n0", 1)]) for i in range(6)]
    s = snap(nodes(1), flat_teams({"a": 1, "b": 1}), running, many("lab/a", 5) + many("lab/b", 5))
    plan = policy.plan(s)
    assert team_of_start(s, plan) == {"lab/b": 2}


def _a_far_below_its_share_with_a_large_job(**cfg):
    """a (share 2 of 16) runs nothing and waits with an 8-GPU job; b (share 14) runs 8 of n1 and waits with 1-GPU
    jobs; n0 is free."""
    running = [run(f"b{i}", "lab/b", [("n1", 1)]) for i in range(8)]
    return snap(nodes(2), flat_teams({"a": 1, "b": 7}), running,
                [pend("a-big", "lab/a", 8)] + many("lab/b", 10, prefix="bq"), **cfg)


def test_jobs_that_start_as_their_teams_own_work_take_the_free_gpus_before_jobs_that_borrow():
    """a is further below its share and comes first in Fair-Tree order, but its job would hold 6 GPUs beyond its
    share while b is owed them. The free node goes to b's six jobs within its guaranteed part first, then two more of
    b's borrow what is left (Kueue's admission within nominal quota before borrowing); a's job waits. With
    ``guaranteed_first`` off, a's job takes the node (docs/policy.md §4)."""
    s = _a_far_below_its_share_with_a_large_job()
    plan = policy.plan(s)
    check_plan(s, plan)
    started = starts(plan)
    assert team_of_start(s, plan) == {"lab/b": 8} and "a-big" in plan.waiting
    assert sorted(a.scavenger for a in started.values()) == [False] * 6 + [True] * 2
    s = _a_far_below_its_share_with_a_large_job(guaranteed_first=False)
    assert team_of_start(s, policy.plan(s)) == {"lab/a": 8}


def test_jobs_that_fit_the_free_gpus_as_their_teams_own_work_start_before_any_claim():
    """a (share 8 of 16) waits with an 8-GPU job and b (share 4) with four 1-GPU jobs; c, entitled to 4, runs 12 (8 on
    n0, 4 on n1) and n1 has 4 free GPUs. The first batch pass hands out free GPUs only: b's jobs start on them at
    once, and a's job then claims n0 from c. Were claims made in that pass, a, first in Fair-Tree order, would claim
    n1 (its free GPUs and c's 4 jobs there) and b would wait for c's jobs on n0 to stop (docs/policy.md §4)."""
    running = ([run(f"c0{i}", "lab/c", [("n0", 1)]) for i in range(8)]
               + [run(f"c1{i}", "lab/c", [("n1", 1)]) for i in range(4)])
    s = snap(nodes(2), flat_teams({"a": 2, "b": 1, "c": 1}), running, [pend("a-big", "lab/a", 8)] + many("lab/b", 4))
    plan = policy.plan(s)
    check_plan(s, plan)
    assert team_of_start(s, plan) == {"lab/b": 4}
    assert set(preempts(plan)) == {f"c0{i}" for i in range(8)}
    assert {p.for_job for p in preempts(plan).values()} == {"a-big"}


def test_a_gang_beyond_its_teams_own_work_holds_the_teams_smaller_jobs_to_the_second_pass():
    """a (share 8 of 32) waits with a 16-GPU gang over two nodes, submitted first, and four 1-GPU jobs; c (share 8)
    runs 4 and waits with four 1-GPU jobs; b, entitled to 16, runs 24 (8 borrowed on n2). n3 has 4 free GPUs. a
    comes first in Fair-Tree order, but its gang keeps its place in the first pass and ends a's turn there, so c's
    own jobs take the free GPUs; a's smaller jobs come in the second pass, where one claims b's borrowed GPUs (they
    would otherwise fill the share the gang's claims and turn wait for, docs/policy.md §4, §7)."""
    running = ([run(f"b{i}", "lab/b", [(f"n{i // 8}", 1)]) for i in range(16)]
               + [run("b-loan", "lab/b", [("n2", 8)], scavenger=True)]
               + [run(f"c{i}", "lab/c", [("n3", 1)]) for i in range(4)])
    pending = ([pend("a-gang", "lab/a", 16, submit=NOW - 2 * HOUR)] + many("lab/a", 4, prefix="a-small")
               + many("lab/c", 4, prefix="c-next"))
    s = snap(nodes(4), flat_teams({"a": 1, "b": 2, "c": 1}), running, pending)
    plan = policy.plan(s)
    check_plan(s, plan)
    assert team_of_start(s, plan) == {"lab/c": 4}
    assert {j: p.for_job for j, p in preempts(plan).items()} == {"b-loan": "a-small000"}  # (b's borrowed work)


def test_a_gang_behind_a_job_that_cannot_start_is_passed_over_in_the_first_pass():
    """As above, but a's queue starts with a 6-GPU job of one node (its own work; only 4 GPUs are free), a 1-GPU
    job, then the gang: the team waits for its 6-GPU job anyway, so the gang does not end its first pass, and a's
    1-GPU jobs before and behind the gang take the free GPUs as its own work (a, furthest below its share, comes
    first). Before, the gang ended a's pass once the 1-GPU job ahead of it had started, and c took 3 GPUs."""
    running = ([run(f"b{i}", "lab/b", [(f"n{i // 8}", 1)]) for i in range(16)]
               + [run("b-loan", "lab/b", [("n2", 8)], scavenger=True)]
               + [run(f"c{i}", "lab/c", [("n3", 1)]) for i in range(4)])
    pending = ([pend("a-six", "lab/a", 6, submit=NOW - 3 * HOUR), pend("a-one", "lab/a", submit=NOW - 3 * HOUR + 1),
                pend("a-gang", "lab/a", 16, submit=NOW - 2 * HOUR)]
               + many("lab/a", 4, prefix="a-small") + many("lab/c", 4, prefix="c-next"))
    s = snap(nodes(4), flat_teams({"a": 1, "b": 2, "c": 1}), running, pending)
    plan = policy.plan(s)
    check_plan(s, plan)
    assert team_of_start(s, plan) == {"lab/a": 4}
    assert "a-one" in starts(plan) and not starts(plan).keys() & {"a-six", "a-gang"}


def test_standing_updates_within_one_cycle():
    """Equal teams and 4 free GPUs: 2 each, not 4 to whoever happened to rank first."""
    s = snap(nodes(1, gpus=4), flat_teams({"a": 1, "b": 1}), pending=many("lab/a", 10) + many("lab/b", 10))
    plan = policy.plan(s)
    assert team_of_start(s, plan) == {"lab/a": 2, "lab/b": 2}


def test_decayed_usage_breaks_ties_between_equally_owed_teams():
    """One free GPU, two teams both below their share: the one that used less lately goes first."""
    teams = (TeamState("lab", None, 2), TeamState("lab/a", "lab", 1, usage_gpu_s=9e6),
             TeamState("lab/b", "lab", 1, usage_gpu_s=1e6))
    s = snap(nodes(1, gpus=1), teams, pending=many("lab/a", 3) + many("lab/b", 3))
    assert team_of_start(s, policy.plan(s)) == {"lab/b": 1}
    teams = (TeamState("lab", None, 2), TeamState("lab/a", "lab", 1, usage_gpu_s=1e6),
             TeamState("lab/b", "lab", 1, usage_gpu_s=9e6))
    s = snap(nodes(1, gpus=1), teams, pending=many("lab/a", 3) + many("lab/b", 3))
    assert team_of_start(s, policy.plan(s)) == {"lab/a": 1}


def test_a_groups_usage_is_the_sum_of_its_teams():
    """Fair Tree compares groups first: g1's two teams used 6 units each (12 in all), g2's 1 and 7 (8). With one
    free GPU and every team equally short of its share, g2 goes first and, inside it, c (the lighter user), although
    g1's heaviest team used less than d alone."""
    teams = (TeamState("lab", None, 4), TeamState("lab/g1", "lab", 2), TeamState("lab/g2", "lab", 2),
             TeamState("lab/g1/a", "lab/g1", 1, usage_gpu_s=6e6), TeamState("lab/g1/b", "lab/g1", 1, usage_gpu_s=6e6),
             TeamState("lab/g2/c", "lab/g2", 1, usage_gpu_s=1e6), TeamState("lab/g2/d", "lab/g2", 1, usage_gpu_s=7e6))
    pending = [pend(f"{t}1", f"lab/{g}/{t}") for g, t in (("g1", "a"), ("g1", "b"), ("g2", "c"), ("g2", "d"))]
    s = snap(nodes(1, gpus=1), teams, pending=pending)
    assert team_of_start(s, policy.plan(s)) == {"lab/g2/c": 1}


def test_within_a_team_rank_then_submit_then_id():
    jobs = [pend("late", "lab/a", submit=NOW - 60), pend("early", "lab/a", submit=NOW - 7200),
            pend("boss", "lab/a", submit=NOW - 10, rank=-1), pend("b-tie", "lab/a", submit=NOW - 500),
            pend("a-tie", "lab/a", submit=NOW - 500)]
    s = snap(nodes(1, gpus=3), flat_teams({"a": 1}), pending=jobs)
    assert set(starts(policy.plan(s))) == {"boss", "early", "a-tie"}


def test_waiting_reason_names_the_team_and_its_share():
    s = snap(nodes(1, gpus=2), flat_teams({"a": 1, "b": 1}), pending=many("lab/a", 3) + many("lab/b", 3))
    plan = policy.plan(s)
    check_plan(s, plan)
    assert "lab/a" in plan.waiting["a002"] and "fair share" in plan.waiting["a002"]
    assert plan.waiting_code["a002"] == "at-share"


def test_water_fill_is_max_min_fair():
    got = water_fill(10, [("a", 0.5, 2), ("b", 0.25, 100), ("c", 0.25, 100)])
    assert got == {"a": 2, "b": 4, "c": 4}
    assert water_fill(10, [("a", 0.0, 5), ("b", 0.0, 20)]) == {"a": 5, "b": 5}


def test_entitlements_follow_demand_hierarchically():
    teams = (TeamState("lab", None, 2), TeamState("lab/a", "lab", 1), TeamState("lab/b", "lab", 1),
             TeamState("lab/a/x", "lab/a", 0.5), TeamState("lab/a/y", "lab/a", 0.5))
    tree = TeamTree(teams, [], horizon_s=HOUR)
    tree.set_entitlements(100, {"lab/a/x": 10, "lab/a/y": 80, "lab/b": 80})
    assert tree.entitled["lab/a/x"] == 10
    assert tree.entitled["lab/a/y"] == 40
    assert tree.entitled["lab/b"] == 50


def _pick_from_scratch(tree: TeamTree, live: set[str]) -> str | None:
    """The Fair-Tree pick as docs/policy.md §4 states it, computed in full: from the root, the child with live
    leaves under it with the smallest ``rank_key`` (its first tier: a live leaf owed a GPU under it), down to a
    leaf."""
    owed = tree.owed_paths(live)
    under = {a for leaf in live for a in tree.paths[leaf]}
    node = ""
    while True:
        kids = [c for c in tree.children.get(node, ()) if c in under]
        if not kids:
            return node or None
        node = min(kids, key=lambda c: tree.rank_key(c, c in owed))


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(st.tuples(st.sampled_from(["start", "stop", "borrow", "drop", "entitle"]), st.integers(0, 5),
                                st.integers(1, 8)), max_size=40),
       demand=st.lists(st.integers(0, 30), min_size=6, max_size=6))
# the one owed team of group 0 runs out of jobs: group 0 leaves the first tier, and group 1, which has used less, comes
# first again
@example(steps=[("start", 1, 8), ("start", 2, 8), ("start", 4, 8), ("drop", 0, 1)], demand=[5, 5, 5, 0, 5, 0])
def test_the_fair_order_kept_between_picks_is_the_order_computed_anew(steps, demand):
    """The walk's order keeps its ranking between picks and updates it for the teams whose allocation or standing
    changed: after any run of starts, stops, borrowed starts, exhausted teams (whose jobs may still stop) and new
    entitlements, its pick is the one computed in full on the same tree (two levels: groups, then teams)."""
    teams = [TeamState("lab", None, 12), TeamState("lab/g0", "lab", 6), TeamState("lab/g1", "lab", 6)]
    teams += [TeamState(f"lab/g{i % 2}/t{i}", f"lab/g{i % 2}", 1 + i % 3) for i in range(6)]
    tree = TeamTree(teams, [], horizon_s=HOUR)
    names = [f"lab/g{i % 2}/t{i}" for i in range(6)]
    tree.set_entitlements(24.0, dict(zip(names, demand)))
    leaves = [tree.leaf[n] for n in names]
    order, live = FairOrder(tree, leaves), set(leaves)
    assert order.pick() == _pick_from_scratch(tree, live)
    for kind, i, gpus in steps:
        if kind == "start":
            tree.add_alloc(names[i], gpus)
        elif kind == "stop":
            tree.add_alloc(names[i], -gpus)
        elif kind == "borrow":
            tree.add_standing(names[i], gpus)
        elif kind == "entitle":
            tree.set_entitlements(float(8 * gpus), dict(zip(names, demand[i:] + demand[:i])))
        elif leaves[i] in live:
            live.discard(leaves[i])
            order.drop(leaves[i])
        assert order.pick() == _pick_from_scratch(tree, live)


@settings(max_examples=200, deadline=None)
@given(grants=st.lists(st.integers(1, 9), min_size=2, max_size=4),
       demand=st.lists(st.integers(0, 40), min_size=4, max_size=4),
       alloc=st.lists(st.floats(0, 30, allow_nan=False), min_size=4, max_size=4),
       capacity=st.integers(8, 64))
def test_own_and_owed_gpus_are_the_largest_sizes_the_bounds_allow(grants, demand, alloc, capacity):
    """``owed_gpus`` is the largest job a team is owed whole and ``own_gpus`` the largest that would start as its own
    work (owed whole and within its guaranteed part, not borrowed): the first pass of the batch walk serves no job
    above them, and every job up to them (docs/policy.md §4)."""
    teams = (TeamState("lab", None, sum(grants)),) + tuple(
        TeamState(f"lab/t{i}", "lab", g) for i, g in enumerate(grants))
    tree = TeamTree(teams, [], horizon_s=HOUR)
    tree.set_entitlements(float(capacity), {f"lab/t{i}": d for i, d in enumerate(demand[:len(grants)])})
    for i in range(len(grants)):
        team = f"lab/t{i}"
        tree.add_alloc(team, alloc[i])
        leaf = tree.leaf[team]
        owed, own = tree.owed_gpus(leaf), tree.own_gpus(leaf)
        assert all(tree.owed(leaf, s) == (s <= owed) for s in range(1, 80))
        assert all((tree.owed(leaf, s) and tree.guaranteed(team, s)) == (s <= own) for s in range(1, 80))
        assert own <= owed
