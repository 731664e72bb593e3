"""Tiny builders for hand-made snapshots, the plan invariants every test (and property test) checks, and plain
reference versions of the policy's shortcuts."""

from __future__ import annotations

import math

from scheduling.policy import (
    DEBUG,
    DRAINING,
    HEALTHY,
    WAIT_CODES,
    BudgetPolicy,
    Contract,
    FlagSquatting,
    NodeState,
    PendingJob,
    Plan,
    PolicyConfig,
    Preempt,
    Release,
    RunningJob,
    Snapshot,
    Start,
    TeamState,
    turns,
)
from scheduling.policy.placement import node_needs
from scheduling.policy.preemption import REPEAT_MIN_RUN_S, protected_until
from scheduling.policy.types import run_limit_s

STANDARD = Contract("standard", protected_s=3600, grace_s=600)
SCAVENGER = Contract("scavenger", protected_s=0, grace_s=30)
LONG = Contract("long", protected_s=24 * 3600, grace_s=1800, max_runtime_s=3 * 24 * 3600)
SHORT = Contract("short", protected_s=0, grace_s=60, max_runtime_s=3600)
DEBUG_C = Contract("debug", protected_s=4 * 3600, grace_s=30, max_runtime_s=4 * 3600, queue=DEBUG)
CONTRACTS = (STANDARD, SCAVENGER, LONG, SHORT, DEBUG_C)
HOUR = 3600.0
NOW = 100 * HOUR


def nodes(n: int, gpus: int = 8, gpu_type: str = "H100", prefix: str = "n", **kw) -> tuple[NodeState, ...]:
    return tuple(NodeState(f"{prefix}{i}", gpu_type, gpus, **kw) for i in range(n))


def flat_teams(grants: dict[str, float], spent: tuple[str, ...] = (), **kw) -> tuple[TeamState, ...]:
    """``lab`` with one child per grant; the children named in ``spent`` have used up their budget."""
    out = [TeamState("lab", None, sum(grants.values()))]
    out += [TeamState(f"lab/{t}", "lab", g, **({**kw, "remaining_gpu_hours": 0.0} if t in spent else kw))
            for t, g in grants.items()]
    return tuple(out)


def run(jid: str, team: str, placement, started: float = NOW - 10 * HOUR, contract: str = "standard",
        gpu_type: str = "H100", **kw) -> RunningJob:
    placement = tuple(sorted(placement))
    return RunningJob(jid, team, sum(k for _, k in placement), contract, placement, started_s=started,
                      submit_s=started - 60, gpu_type=gpu_type, **kw)


def pend(jid: str, team: str, gpus: int = 1, submit: float = NOW - HOUR, contract: str = "standard",
         **kw) -> PendingJob:
    return PendingJob(jid, team, gpus, contract, submit_s=submit, **kw)


def snap(node_list, teams, running=(), pending=(), reservations=(), now: float = NOW, **cfg) -> Snapshot:
    return Snapshot(now_s=now, nodes=tuple(node_list), teams=tuple(teams), contracts=CONTRACTS,
                    running=tuple(running), pending=tuple(pending), reservations=tuple(reservations),
                    config=PolicyConfig(**cfg))


def starts(plan: Plan) -> dict[str, Start]:
    return {a.job_id: a for a in plan.actions if isinstance(a, Start)}


def preempts(plan: Plan) -> dict[str, Preempt]:
    return {a.job_id: a for a in plan.actions if isinstance(a, Preempt)}


def releases(plan: Plan) -> dict[str, Release]:
    return {a.job_id: a for a in plan.actions if isinstance(a, Release)}


def flags(plan: Plan) -> dict[str, FlagSquatting]:
    return {a.job_id: a for a in plan.actions if isinstance(a, FlagSquatting)}


def team_of_start(s: Snapshot, plan: Plan) -> dict[str, int]:
    by_id = {j.id: j for j in s.pending}
    out: dict[str, int] = {}
    for jid in starts(plan):
        j = by_id[jid]
        out[j.team] = out.get(j.team, 0) + j.gpus
    return out


def spent_teams(s: Snapshot) -> set[str]:
    """Teams whose own balance is spent (their work runs only as scavenger)."""
    return {t.id for t in s.teams if t.remaining_gpu_hours <= 0}


def check_plan(s: Snapshot, plan: Plan) -> None:
    """The rules that never bend. Raises AssertionError with the broken rule."""
    node = {n.id: n for n in s.nodes}
    pending = {j.id: j for j in s.pending}
    running = {r.id: r for r in s.running}
    contracts = {c.name: c for c in s.contracts}
    st = starts(plan)
    pre = preempts(plan)
    rel = releases(plan)
    kinds = [type(a).__name__ for a in plan.actions]
    ids = [(type(a).__name__, a.job_id) for a in plan.actions]
    assert len(ids) == len(set(ids)), f"an action is repeated: {kinds}"
    assert not (set(pre) & set(rel)), "a job is both preempted and released"
    spent = spent_teams(s)
    used = {n: 0 for n in node}
    for r in s.running:
        for n, k in r.placement:
            if n in used:
                used[n] += k
    started_on = {n: 0 for n in node}
    for jid, a in st.items():
        assert jid in pending, f"start of a job that is not pending: {jid}"
        j = pending[jid]
        assert sum(k for _, k in a.placement) == j.gpus, f"{jid}: placement {a.placement} != {j.gpus} GPUs"
        ns = [n for n, _ in a.placement]
        assert len(ns) == len(set(ns)), f"{jid}: a node listed twice"
        assert all(k > 0 for _, k in a.placement)
        assert all(node[n].health == HEALTHY for n in ns), f"{jid} placed on an unhealthy node"
        types = {node[n].gpu_type for n in ns}
        assert len(types) == 1, f"{jid} split across GPU types {types}"
        if j.gpu_type is not None:
            assert types == {j.gpu_type}, f"{jid} wants {j.gpu_type}, got {types}"
        if j.gpus_per_node:
            assert all(k == j.gpus_per_node for _, k in a.placement), f"{jid}: gang shape broken"
        if j.team in spent:
            assert a.scavenger, f"{jid}: team {j.team} is out of budget but got a non-scavenger start"
        for n, k in a.placement:
            started_on[n] += k
    for n in node:
        assert used[n] + started_on[n] <= node[n].gpus, f"node {n}: GPUs given twice"
    # reservations from the last cycle that the plan keeps hold their free GPUs against other jobs' starts; a turn
    # not ready yet lends them, as borrowed work only
    kept = {(r.job_id, r.placement, r.since_s) for r in plan.reservations if r.kind not in ("turn-wait", "turn")}
    lent = {n for r in plan.reservations if r.kind == "turn" for n, _ in r.placement}
    held = {r.job_id for r in s.reservations}  # (a job that held its GPUs did not borrow them)
    for jid, a in st.items():
        if contracts[pending[jid].contract].queue != DEBUG and jid not in held and lent & {n for n, _ in a.placement}:
            assert a.scavenger, f"{jid} started protected on GPUs a turn lends"
    for n in node:
        free = node[n].gpus - used[n]
        held = sum(k for r in s.reservations if (r.job_id, r.placement, r.since_s) in kept
                   for m, k in r.placement if m == n)
        others = sum(k for jid, a in st.items() for m, k in a.placement if m == n)
        assert others + min(max(free, 0), held) <= max(free, 0) or others == 0, \
            f"node {n}: a start took GPUs held by a reservation"
    # preemption
    leaving = set(pre) | set(rel)
    for jid, p in pre.items():
        assert jid in running, f"preempt of a job that is not running: {jid}"
        r = running[jid]
        assert not r.preempting, f"{jid} is already preempting"
        c = contracts.get(r.contract)
        # the notice is the contract's grace; work started as scavenger runs on the scavenger contract's terms
        scav = contracts.get(s.config.scavenger_contract)
        grace = c.grace_s if c is not None else 0
        assert p.grace_s == (min(grace, scav.grace_s) if r.scavenger and scav is not None else grace), \
            f"{jid}: a notice of {p.grace_s} s against its terms"
        if p.reason == "drain":
            assert any(node[n].health == DRAINING for n, _ in r.placement if n in node)
            continue
        assert c is None or c.queue != DEBUG, "a debug session was preempted"
        # a spent team's work is always preemptible, whatever contract it started under
        assert r.scavenger or r.team in spent or c is None or s.now_s - r.started_s >= c.protected_s, \
            f"{jid} preempted inside its protected time"
        # ... and a requeued job's borrowed run inside its minimum run time (not a loan of debug-pool GPUs)
        loan = r.scavenger and any(node[n].debug_pool for n, _ in r.placement if n in node)
        # ... or a loan of a turn's GPUs (started on them since the turn was made), which the turn takes back
        loan = loan or (p.reason == "turn" and r.scavenger and any(
            x.job_id == p.for_job and x.since_s is not None and r.started_s >= x.since_s for x in plan.reservations))
        if r.scavenger and r.runs and r.team not in spent and not loan and c is not None:
            assert s.now_s - r.started_s >= min(c.protected_s, REPEAT_MIN_RUN_S), \
                f"{jid}, a job stopped {r.runs} times before, preempted again inside its minimum run time"
        assert p.for_job in pending and p.for_job not in st, f"{jid}: preempt for a job that is not waiting"
        j = pending[p.for_job]
        if j.team in spent:
            # in-budget work is the work of a team with budget left, however it was started
            # ... except a loan of debug-pool GPUs, which any debug session takes back
            loan = r.scavenger and any(node[n].debug_pool for n, _ in r.placement if n in node)
            assert (r.team in spent or loan) and contracts[j.contract].queue == DEBUG, \
                f"out-of-budget team {j.team} preempted in-budget work"
        if not r.scavenger and contracts[j.contract].queue != DEBUG:
            # a debug session comes first in its team's own order and may take the team's work past protection;
            # a gang's turn may take the team's work behind it in the team's order
            later = p.reason == "turn" and (r.rank, r.submit_s, r.id) > (j.rank, j.submit_s, j.id)
            assert r.team != j.team or later, "a team preempted its own in-budget job for a batch job"
        res = [x for x in plan.reservations if x.job_id == p.for_job]
        assert len(res) == 1, f"no hold for {p.for_job}"
        hold = res[0]
        assert sum(k for _, k in hold.placement) == j.gpus
        assert len({node[n].gpu_type for n, _ in hold.placement}) == 1
        for n, k in hold.placement:
            stay = sum(k2 for r2 in s.running if r2.id not in leaving and not r2.preempting
                       for m, k2 in r2.placement if m == n)
            assert node[n].gpus - stay - started_on[n] >= k, \
                f"freeing the victims does not make room for {p.for_job} on {n}"
    for r in plan.reservations:
        assert r.job_id in pending and r.job_id not in st, "reservation for a job that is not waiting"
    for j in s.pending:
        assert j.id in st or j.id in plan.waiting, f"{j.id} waits without a reason"
        if j.id in plan.waiting:
            assert plan.waiting[j.id].strip(), "empty waiting reason"
    # every reason has its kind, and only waiting jobs have one
    assert not plan.waiting.keys() & st.keys(), "a job that starts is told why it waits"
    assert plan.waiting_code.keys() == plan.waiting.keys()
    assert set(plan.waiting_code.values()) <= set(WAIT_CODES), plan.waiting_code


def nodes_freeing_first_in_full(self, job, could_take, pools, turn=False):
    """``GangReservations._nodes_freeing_first`` as docs/policy.md §7 states it: every running job's end, every
    node's time, the best option of each need."""
    ends, jobs_on = {}, {}
    for r in self.snap.running:
        c = self.contract(r.contract)
        limit = run_limit_s(r, c)
        end = r.started_s + limit if limit is not None else math.inf
        if r.preempting and r.preempt_deadline_s is not None:
            end = min(end, r.preempt_deadline_s)
        if c.queue != DEBUG and could_take(r):
            until = protected_until(r, c, self.tree.spent, self.index.pool)
            end = min(end, self.now if until is None else until)
        for n, k in r.placement:
            ends.setdefault(n, []).append((end, k))
            jobs_on[n] = jobs_on.get(n, 0) + (not r.preempting)
    for a in self.starts:
        c = self.contract(self.pending_by_id[a.job_id].contract)
        limit = run_limit_s(self.pending_by_id[a.job_id], c)
        end = (self.now + limit if limit is not None else math.inf) if c.queue == DEBUG else (
            self.now if a.scavenger else self.now + c.protected_s)
        for n, k in a.placement:
            ends.setdefault(n, []).append((end, k))
            jobs_on[n] = jobs_on.get(n, 0) + 1
    index, best = self.index, None
    for t in index.types if job.gpu_type is None else [job.gpu_type]:
        needs = node_needs(job.gpus, job.gpus_per_node, index.maxcap[t])
        if needs is None:
            continue
        cands = [n for key in index.keys(t, pools) for n in index.group_nodes[key]
                 if n not in self.preemptor.blocked_nodes]
        placement, used, missing_sum, latest = [], set(), 0, 0.0
        for need in sorted(needs, reverse=True):
            options = []
            for n in cands:
                if n in used or index.cap[n] < need:
                    continue
                missing = max(0, need - index.avail[n])
                ready, got = self.now, 0
                for end, k in sorted(ends.get(n, ())) if missing else ():
                    got, ready = got + k, end
                    if got >= missing:
                        break
                options.append((ready, jobs_on.get(n, 0), missing, n) if turn else (missing, ready, 0, n))
            if not options:
                break
            option = min(options)
            ready, missing, n = (option[0], option[2], option[3]) if turn else (option[1], option[0], option[3])
            used.add(n)
            placement.append((n, need))
            missing_sum += missing
            latest = max(latest, ready)
        else:
            cand = ((missing_sum, latest), t, tuple(sorted(placement)))
            if best is None or cand < best:
                best = cand
    return None if best is None else (best[2], best[0][1])


def plan_with_nodes_freeing_first_in_full(s: Snapshot) -> Plan:
    """A fresh budget policy's plan for ``s`` with ``nodes_freeing_first_in_full`` in place of the policy's look."""
    orig = turns.GangReservations._nodes_freeing_first
    turns.GangReservations._nodes_freeing_first = nodes_freeing_first_in_full
    try:
        return BudgetPolicy().plan(s)
    finally:
        turns.GangReservations._nodes_freeing_first = orig
