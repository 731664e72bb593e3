"""Housekeeping actions that need no placement: squatting flags, debug-session releases and node drains.

- A running batch job whose GPUs have been idle (``idle_since_s`` set by the caller from telemetry) for at least
  ``config.squat_idle_s`` is flagged (FlagSquatting): the portal shows it; the policy does not stop it.
- A debug session idle for ``config.debug_idle_release_s`` is released (reason "idle"); one past its run limit
  (``run_limit_s``: its own time limit or its contract's ``max_runtime_s``) is released (reason "expired"; checked
  first).
- Every job on a DRAINING node that is not already preempting gets Preempt(reason="drain") with its notice
  (``notice_s``: its contract's grace, at most the scavenger contract's for work started as scavenger; the only
  preemption that ignores protected time). Jobs on DOWN nodes are the caller's business.
"""

from __future__ import annotations

from .types import (
    DEBUG,
    DRAINING,
    Contract,
    FlagSquatting,
    Preempt,
    Release,
    RunningJob,
    Snapshot,
    notice_s,
    run_limit_s,
)


def housekeeping(snapshot: Snapshot, contracts: dict[str, Contract], running: list[RunningJob]):
    """Return (actions, ids of jobs that leave: drained or released)."""
    now = snapshot.now_s
    cfg = snapshot.config
    draining = {n.id for n in snapshot.nodes if n.health == DRAINING}
    scavenger = contracts.get(cfg.scavenger_contract)
    actions = []
    leaving: set[str] = set()
    for job in running:
        contract = contracts.get(job.contract)
        is_debug = contract is not None and contract.queue == DEBUG
        if draining and not job.preempting and any(n in draining for n, _ in job.placement):
            actions.append(Preempt(job.id, notice_s(job, contract, scavenger), "drain", None))
            leaving.add(job.id)
            continue
        if is_debug:
            if job.preempting:
                continue
            limit = run_limit_s(job, contract)
            if limit is not None and now - job.started_s >= limit:
                actions.append(Release(job.id, "expired"))
                leaving.add(job.id)
            elif job.idle_since_s is not None and now - job.idle_since_s >= cfg.debug_idle_release_s:
                actions.append(Release(job.id, "idle"))
                leaving.add(job.id)
            continue
        if job.idle_since_s is not None and now - job.idle_since_s >= cfg.squat_idle_s:
            actions.append(FlagSquatting(job.id, now - job.idle_since_s))
    return actions, leaving
