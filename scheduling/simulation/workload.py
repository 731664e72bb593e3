"""The jobs a replay runs: the trace's jobs that fit the cluster, each under its contract, and the synthetic streams
the options add (``--debug-rate`` sessions, ``--squatters``, sessions ``--debug-forget`` leaves open), in queue
order. Seeded: the same configuration gives the same jobs under every policy.

Pure Python, no Django. The replay itself is engine.py.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from scheduling.policy.types import NodeState
from scheduling.simulation.model import (
    DEBUG_SESSION_MINUTES,
    HOUR,
    SimConfig,
    SimJob,
    cluster_fits,
    oversized_session,
    session_gpus,
)
from scheduling.simulation.trace import TraceJob, unique_id


@dataclass
class Workload:
    jobs: list[SimJob]  # sorted by their queue key
    rejected: int  # trace jobs no node set of the cluster could ever hold (refused at submit)
    debug_as_batch: int  # trace sessions larger than the portal accepts, submitted as batch jobs instead


def batch_contract(cfg: SimConfig, duration_s: float) -> str:
    """The contract a trace's batch job runs under: ``long`` beyond ``long_threshold_s``, else ``standard``."""
    return "long" if duration_s > cfg.long_threshold_s else "standard"


def build_jobs(cfg: SimConfig, trace: list[TraceJob], nodes: list[NodeState], end: float) -> Workload:
    """The replay's jobs from ``trace`` on ``nodes`` (the synthetic streams run until ``end``). A job that no set
    of nodes of one type could ever hold (a GPU type the cluster lacks included) is refused at submit and counted;
    a job whose team the budgets do not know stops it with a ``ValueError`` naming the trace line. (``simulate``
    names both mistakes by file and line before: cli.py.)"""
    jobs: list[SimJob] = []
    rejected = debug_as_batch = 0
    taken = {tj.id for tj in trace}
    fits = cluster_fits(cfg.nodes)
    for tj in trace:
        if not fits(tj):
            rejected += 1  # a real scheduler refuses it at submit; it never enters the queue
            continue
        if tj.team not in cfg.budgets.grant:
            raise ValueError(f"line {tj.line}: team: unknown team {tj.team!r} (not in the budget file)")
        kind = tj.kind
        if oversized_session(tj, cfg.policy_config.debug_max_gpus):
            # the portal refuses a debug session that large ("submit it as a batch job"); its user does so
            kind = "train"
            debug_as_batch += 1
        contract = "debug" if kind == "debug" else batch_contract(cfg, tj.duration_s)
        # the key is the policy's queue order within a team (submit time, then id): the pending queues kept
        # sorted by it are handed over as Snapshot.pending_by_team
        jobs.append(SimJob(tj, contract, kind, (tj.submit_s, tj.id)))
    shares = cfg.budgets.shares()
    share_teams = sorted(t for t, s in shares.items() if s > 0)
    weights = [shares[t] for t in share_teams]
    if cfg.debug_rate_per_hour > 0 and share_teams:
        jobs.extend(_sessions(cfg, share_teams, weights, end, taken))
    if cfg.squatters > 0 and share_teams:
        jobs.extend(_squatters(cfg, share_teams, weights, nodes, end, taken))
    jobs.sort(key=lambda j: j.key)
    if cfg.debug_forget_share > 0:
        rng = random.Random(f"forget-{cfg.seed}")
        for j in jobs:
            if j.kind == "debug":
                j.forgotten = rng.random() < cfg.debug_forget_share
    return Workload(jobs, rejected, debug_as_batch)


def _sessions(cfg: SimConfig, teams: list[str], weights: list[float], end: float, taken: set[str]) -> list[SimJob]:
    """The ``--debug-rate`` stream: Poisson arrivals until ``end``, each session of a team drawn in proportion to
    its budget share, of ``session_gpus`` GPUs and ``DEBUG_SESSION_MINUTES``, at a low utilization."""
    rng = random.Random(f"debug-{cfg.seed}")
    sizes = session_gpus(cfg.nodes)
    out = []
    t = rng.expovariate(cfg.debug_rate_per_hour / HOUR)
    k = 0
    while t < end:
        team = rng.choices(teams, weights)[0]
        tj = TraceJob(
            id=unique_id(f"debug-{k}", taken), submit_s=t, team=team, gpus=rng.randint(*sizes),
            duration_s=rng.uniform(*DEBUG_SESSION_MINUTES) * 60, kind="debug", utilization=0.1,
        )
        out.append(SimJob(tj, "debug", "debug", (t, tj.id)))
        k += 1
        t += rng.expovariate(cfg.debug_rate_per_hour / HOUR)
    return out


def _squatters(cfg: SimConfig, teams: list[str], weights: list[float], nodes: list[NodeState], end: float,
               taken: set[str]) -> list[SimJob]:
    """``--squatters``: placeholder jobs of 1-8 GPUs that hold their GPUs for three days at zero utilization,
    submitted in the first half of the window."""
    rng = random.Random(f"squat-{cfg.seed}")
    biggest = max(n.gpus for n in nodes)
    out = []
    for k in range(cfg.squatters):
        t = rng.uniform(0, max(1.0, end * 0.5))
        team = rng.choices(teams, weights)[0]
        g = min(biggest, rng.choice((1, 2, 4, 8)))
        tj = TraceJob(
            id=unique_id(f"squat-{k}", taken), submit_s=t, team=team, gpus=g, duration_s=3 * 86400.0,
            utilization=0.0,
        )
        out.append(SimJob(tj, "standard", "squat", (t, tj.id)))
    return out
