"""The benchmark's snapshot is the case issue #3 names: 150 users, a 3-level tree, mixed gang sizes."""

from __future__ import annotations

from collections import Counter

from scheduling.policy import DRAINING, synthetic_snapshot


def test_the_benchmark_snapshot_is_a_busy_1024_gpu_cluster_of_150_users_in_a_three_level_tree():
    s = synthetic_snapshot(1024, 30, 2000)
    assert len(s.nodes) == 128 and {n.gpus for n in s.nodes} == {8}
    assert {n.gpu_type for n in s.nodes} == {"H100", "B200"}
    assert sum(n.debug_pool for n in s.nodes) == 2 and [n.health for n in s.nodes].count(DRAINING) == 1
    # the tree: the lab, its groups, their teams; 30 in all
    parent = {t.id: t.parent for t in s.teams}
    depth = {t: 1 if p is None else 2 if parent[p] is None else 3 for t, p in parent.items()}
    assert len(s.teams) == 30 and Counter(depth.values())[1] == 1 and max(depth.values()) == 3
    # with recent usage to decay, and some teams past their budgets (their work runs as scavenger work)
    assert all(t.usage_gpu_s > 0 for t in s.teams if t.parent) and any(t.remaining_gpu_hours <= 0 for t in s.teams)
    # work of 150 users, on the leaves only; no node holds more than it has; about 90% of the GPUs busy
    jobs = s.running + s.pending
    leaves = {t for t in parent if t not in set(parent.values())}
    assert len({j.user for j in jobs}) == 150 and {j.team for j in jobs} <= leaves
    used = Counter()
    for r in s.running:
        for n, k in r.placement:
            used[n] += k
    assert max(used.values()) <= 8 and 0.85 <= sum(used.values()) / 1024 <= 0.95
    # 2,000 waiting jobs of 1 to 64 GPUs, gangs among them, a few sessions and repeat victims
    sizes = Counter(j.gpus for j in s.pending)
    assert len(s.pending) == 2000 and set(sizes) == {1, 2, 4, 8, 16, 32, 64} and sizes[1] > sizes[64]
    assert any(j.gpus_per_node for j in s.pending) and any(j.contract == "debug" for j in s.pending)
    assert any(j.runs for j in s.pending) and any(r.preempting for r in s.running)


def test_the_benchmark_snapshot_is_the_same_for_a_seed_and_another_for_another_seed():
    assert synthetic_snapshot(256, 8, 300, seed=1) == synthetic_snapshot(256, 8, 300, seed=1)
    assert synthetic_snapshot(256, 8, 300, seed=1) != synthetic_snapshot(256, 8, 300, seed=2)
