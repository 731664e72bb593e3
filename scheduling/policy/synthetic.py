"""A deterministic, realistic synthetic snapshot for benchmarks and tests (seeded ``random.Random``, no I/O).

``synthetic_snapshot(1024, 30, 10_000)`` is the benchmark case: 128 x 8-GPU nodes (H100 and B200, two debug-pool
nodes, one draining), a 3-level team tree, ~90% of the GPUs busy with ~900 running jobs of mixed gang sizes and
contracts (some scavengers, some already preempting, some idle), and ``pending`` jobs of sizes 1..64.
"""

from __future__ import annotations

import random

from .types import (
    DEBUG,
    DRAINING,
    HEALTHY,
    Contract,
    NodeState,
    PendingJob,
    RunningJob,
    Snapshot,
    TeamState,
)

CONTRACTS = (
    Contract("scavenger", protected_s=0, grace_s=30, max_runtime_s=None, price_factor=0.3),
    Contract("standard", protected_s=2 * 3600, grace_s=600, max_runtime_s=7 * 24 * 3600),
    Contract("long", protected_s=24 * 3600, grace_s=1800, max_runtime_s=14 * 24 * 3600, price_factor=1.5),
    Contract("debug", protected_s=4 * 3600, grace_s=30, max_runtime_s=4 * 3600, queue=DEBUG),
)
SIZES = (1, 1, 1, 1, 1, 1, 2, 2, 4, 4, 8, 8, 16, 32, 64)  # pending gang sizes (uniform pick)
RUN_SIZES = (1, 2, 4, 8, 16, 32, 64)  # running: mostly single GPUs, as in real traces (Philly: 93% 1-GPU)
RUN_WEIGHTS = (0.95, 0.02, 0.012, 0.01, 0.004, 0.003, 0.001)


def _team_tree(rng: random.Random, teams: int) -> list[TeamState]:
    out = [TeamState("lab", None, grant_gpu_hours=1_000_000.0)]
    groups = max(1, min(teams - 1, round((teams - 1) ** 0.5)))
    group_ids = [f"lab/g{i}" for i in range(groups)]
    leaves = max(0, teams - 1 - groups)
    per_group = [0] * groups
    for i in range(leaves):
        per_group[i % groups] += 1
    for gi, gid in enumerate(group_ids):
        grant = rng.uniform(50_000, 200_000)
        out.append(TeamState(gid, "lab", grant, usage_gpu_s=rng.uniform(0, 5e7)))
        child_grants = [rng.uniform(0.1, 1.0) for _ in range(per_group[gi])]
        scale = grant * rng.uniform(0.7, 1.0) / max(sum(child_grants), 1e-9)
        for ci, cg in enumerate(child_grants):
            spent = rng.random() < 0.1
            out.append(TeamState(f"{gid}/t{ci}", gid, cg * scale, usage_gpu_s=rng.uniform(0, 5e7),
                                 remaining_gpu_hours=-1.0 if spent else rng.uniform(100, 50_000)))
    return out[:teams] if teams >= 1 else out[:1]


def synthetic_snapshot(gpus: int, teams: int, pending: int, users: int = 150, seed: int = 0) -> Snapshot:
    rng = random.Random(seed)
    now = 1_000_000.0
    n_nodes = max(1, gpus // 8)
    nodes = []
    for i in range(n_nodes):
        gtype = "H100" if i % 5 < 3 else "B200"
        health = DRAINING if i == n_nodes // 2 and n_nodes >= 8 else HEALTHY
        nodes.append(NodeState(f"n{i:04d}", gtype, 8, health=health, debug_pool=n_nodes >= 16 and i < 2))
    team_states = _team_tree(rng, teams)
    leaf_ids = [t.id for t in team_states if not any(c.parent == t.id for c in team_states)] or ["lab"]
    user_team = {f"u{u:03d}": leaf_ids[u % len(leaf_ids)] for u in range(users)}
    user_ids = sorted(user_team)

    free = {n.id: n.gpus for n in nodes}
    by_type: dict[str, list[str]] = {}
    for n in nodes:
        by_type.setdefault(n.gpu_type, []).append(n.id)
    running: list[RunningJob] = []
    target = int(gpus * 0.9)
    busy = 0
    attempts = 0
    while busy < target and attempts < gpus * 4:
        attempts += 1
        size = rng.choices(RUN_SIZES, RUN_WEIGHTS)[0]
        gtype = rng.choice(sorted(by_type))
        placement = []
        if size >= 8:
            whole = [n for n in by_type[gtype] if free[n] == 8]
            if len(whole) < size // 8:
                continue
            placement = [(n, 8) for n in rng.sample(whole, size // 8)]
        else:
            fits = [n for n in by_type[gtype] if free[n] >= size]
            if not fits:
                continue
            placement = [(rng.choice(fits), size)]
        for n, k in placement:
            free[n] -= k
        busy += size
        user = rng.choice(user_ids)
        contract = rng.choices(("scavenger", "standard", "long", "debug"), (10, 70, 15, 5))[0]
        if contract == "debug" and size > 8:
            contract = "standard"
        started = now - rng.uniform(60, 3 * 24 * 3600)
        if contract == "debug":
            started = now - rng.uniform(60, 3 * 3600)
        preempting = rng.random() < 0.02
        idle = now - rng.uniform(0, 7200) if rng.random() < 0.05 else None
        running.append(RunningJob(
            id=f"r{len(running):05d}", team=user_team[user], gpus=size, contract=contract,
            placement=tuple(sorted(placement)), started_s=started, submit_s=started - rng.uniform(0, 3600),
            gpu_type=gtype, user=user, scavenger=contract == "scavenger", preempting=preempting,
            preempt_deadline_s=now + 300 if preempting else None,
            last_checkpoint_s=started + rng.uniform(0, now - started) if rng.random() < 0.7 else None,
            utilization=0.0 if idle else rng.uniform(0.3, 1.0), idle_since_s=idle))

    jobs: list[PendingJob] = []
    for i in range(pending):
        user = rng.choice(user_ids)
        size = rng.choice(SIZES)
        debug = size <= 2 and rng.random() < 0.03
        gtype = rng.choice((None, None, "H100", "B200"))
        jobs.append(PendingJob(
            id=f"p{i:06d}", team=user_team[user], gpus=size,
            contract="debug" if debug else rng.choices(("scavenger", "standard", "long"), (10, 75, 15))[0],
            submit_s=now - rng.uniform(0, 2 * 24 * 3600), gpu_type=gtype, user=user,
            rank=0 if rng.random() < 0.9 else rng.randint(-3, 3),
            gpus_per_node=8 if size >= 8 and rng.random() < 0.8 else None,
            runs=1 if rng.random() < 0.05 else 0))
    return Snapshot(now_s=now, nodes=tuple(nodes), teams=tuple(team_states), contracts=CONTRACTS,
                    running=tuple(running), pending=tuple(jobs))


__all__ = ["synthetic_snapshot"]
