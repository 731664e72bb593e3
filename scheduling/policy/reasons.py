"""Waiting reasons: a plain-words sentence for every pending job a cycle did not start (``Plan.waiting``).

The portal shows them next to each job ("why does my job wait?", USERS.md), in budget terms: the team's standing
against its fair share, the teams ahead of it, the GPUs held or reserved for it, when a protected job could yield.
They read the state a finished cycle left (docs/policy.md, §10) and change nothing; a trace replay switches them
off (``PolicyConfig.explain``), since at 10,000 pending jobs they cost as much as the rest of a cycle.
"""

from __future__ import annotations

import math

from .fairshare import OWED_TOL, ROOT, display
from .placement import placement_str
from .preemption import HOLD_SLACK_S
from .queues import shape_of
from .turns import STARVED_TURN_WAIT_S
from .types import DEBUG, PendingJob, Reservation
from .walk import MAX_DEBUG_PLANS


# a reservation's kind -> the waiting code of its job (types.WAIT_CODES)
_RES_CODES = {"hold": "held", "turn-hold": "held", "gang": "gang-reserved", "turn": "turn", "turn-wait": "turn"}


def _teams_ahead(n: int) -> str:
    return f"{n} team{'s' if n != 1 else ''} ahead"


def _mins(t: float) -> str:
    m = max(0, math.ceil(t / 60.0))
    if m < 120:
        return f"{m} min"
    return f"{m / 60:.1f} h"


class WaitingReasons:
    """Mixed into the budget policy's cycle, after whose walk ``_explain`` runs. It reads the cycle's ``tree``,
    ``index``, ``preemptor``, ``queues``, ``started``, ``res_of``, ``res_job``, ``claims``, ``failed_plans``,
    ``plans_left``, ``debug_failed``, ``shortfall``, ``snap``, ``cfg`` and ``now``, calls its
    ``_short_long_enough``, ``_can_ever_fit``, ``_claim_reach``, ``_starved_one_node``, ``_turn_price_s`` and
    ``_plan_shape``, and writes ``waiting`` and ``waiting_code`` (and its own ``debug_ends`` table, built on first
    use)."""

    def _wait(self, job_id: str, code: str, reason: str) -> None:
        """Say why a job waits: in plain words, and its kind (``types.WAIT_CODES``)."""
        self.waiting[job_id] = reason
        self.waiting_code[job_id] = code

    def _wait_all(self, job_ids: list[str], code: str, reason: str) -> None:
        self.waiting.update(dict.fromkeys(job_ids, reason))
        self.waiting_code.update(dict.fromkeys(job_ids, code))

    def _explain(self) -> None:
        started, waiting, res_of = self.started, self.waiting, self.res_of
        leaves = {leaf for qs in self.queues for leaf, q in qs.items() if any(j.id not in started for j in q.jobs)}
        rank = self._leaf_rank(leaves)
        for jid, res in res_of.items():  # the few jobs with a reservation
            if jid not in started and jid not in waiting:
                self._wait(jid, _RES_CODES[res.kind], self._res_reason(self.res_job[jid], res))
        for job in self.failed_plans:  # at most MAX_PREEMPT_PLANS a cycle
            if job.id not in started and job.id not in waiting:
                self._wait(job.id, "no-plan", self._failed_plan_reason(job, rank))
        debug_q, scav_debug_q, batch_q, scav_q = self.queues
        for qs in (debug_q, scav_debug_q):  # sessions: few, each with its own reason
            for q in qs.values():
                for j in q.jobs:
                    if j.id in started or j.id in waiting:
                        continue
                    if (self.plans_left["debug"] <= 0
                            and self._plan_shape(j, qs is scav_debug_q) not in self.debug_failed):
                        # (every session is tried while plans are left: this one came after the last, and no
                        # plan for its shape failed, which would have failed for it too)
                        self._wait(j.id, "plan-limit", (
                            f"no GPU is free for this {j.gpus}-GPU session, and this cycle's {MAX_DEBUG_PLANS} "
                            "preemption plans for sessions went to sessions ahead of it: it is tried again in the "
                            "next cycle"))
                    else:
                        self._wait(j.id, "debug-spent" if self.tree.spent[j.team] else "debug-protected",
                                   self._debug_reason(j))
        # batch work: one reason per team, the same for each of its waiting jobs (queues split by contract hold no
        # session); this is the part that grows with the pending count, so it runs at C speed where it can
        skip = started.union(waiting)
        for qs in (batch_q, scav_q):
            for leaf, q in qs.items():
                never = [shape for shape in q.shapes() if not self._can_ever_fit(shape)]
                if never:  # (the walk passes over jobs too large for any free GPUs: it may not have said so)
                    for j in q.jobs:
                        if j.id not in skip and shape_of(j) in never:
                            self._wait(j.id, "never-fits", self._never_fits_reason(j))
                            skip.add(j.id)
                team = q.jobs[0].team
                if qs is batch_q and self._promises_claims(leaf):
                    # the team's reason promises preemption after a wait; not for jobs larger than it may claim
                    reach = self._claim_reach(leaf, q)
                    too_big = ([j for j in q.jobs if j.gpus > reach and j.id not in skip]
                               if q.sizes()[-1] > reach else ())
                    by_size: dict[int, str] = {}  # the reason depends on the job only through its size
                    for j in too_big:
                        why = by_size.get(j.gpus)
                        if why is None:
                            why = by_size[j.gpus] = self._beyond_claim_reason(j, leaf, rank.get(leaf, 0))
                        self._wait(j.id, "beyond-claim", why)
                        skip.add(j.id)
                head = self.saving.get(leaf) if qs is batch_q else None
                if head is not None and head.id not in started:
                    behind = [j.id for j in q.jobs if j.rank > head.rank and j.id not in skip]
                    self._wait_all(behind, "lead-order", (
                        f"waits behind {head.id}, the {head.gpus}-GPU job its team's lead ranked first: the team "
                        "saves its share for it " + (
                            "(it claims GPUs once its team is owed them)"
                            if head.gpus <= self.tree.entitled[leaf] + OWED_TOL else
                            "(its turn comes once the team has gone without enough of its share to pay for it)")))
                    skip.update(behind)
                todo = [j.id for j in q.jobs if j.id not in skip]
                if todo:
                    kind, why = self._leaf_reason(team, leaf, rank.get(leaf, 0))
                    first = q.jobs[0]
                    if (kind == "at-share" and qs is batch_q and head is None and self.cfg.gang_turns
                            and first.gpus > 1 and todo[0] == first.id and q.sizes()[0] < first.gpus):
                        # the team's smaller jobs refill its share one GPU at a time: say how to get this one going
                        self._wait(first.id, kind, (
                            f"{why}; its team's smaller jobs take the GPUs that free up one by one, so it starts "
                            f"only when {first.gpus} free up together: a lead of {display(leaf)} can rank it first "
                            "to save the team's share for it"))
                        todo = todo[1:]
                    self._wait_all(todo, kind, why)

    @staticmethod
    def _never_fits_reason(job: PendingJob) -> str:
        return (f"asks for {job.gpus} {job.gpu_type or 'GPUs of any type'}"
                + (f" as {job.gpus_per_node} per node" if job.gpus_per_node else "")
                + ": no set of healthy nodes of one GPU type can ever hold that")

    def _leaf_rank(self, leaves: set[str]) -> dict[str, int]:
        """Fair-Tree position of every leaf with work (0 = served first): depth-first, siblings by rank."""
        tree = self.tree
        has = set()
        for leaf in leaves:
            has.update(tree.paths[leaf])
        owed = tree.owed_paths(leaves)
        out: dict[str, int] = {}
        stack = [ROOT]
        while stack:
            node = stack.pop()
            kids = [c for c in tree.children.get(node, ()) if c in has]
            if not kids:
                if node != ROOT:
                    out[node] = len(out)
                continue
            kids.sort(key=lambda c: tree.rank_key(c, c in owed), reverse=True)
            stack.extend(kids)
        return out

    def _leaf_reason(self, team: str, leaf: str, ahead: int) -> tuple[str, str]:
        """The reason every waiting batch job of a team shares (the rest have one of their own): its kind and
        its words."""
        tree = self.tree
        name = display(leaf)
        if tree.spent[team]:  # (its own balance: a parent's spent remainder spends no child, fairshare.py)
            return "spent", ("budget spent (its GPU-hours for the period are used up): it runs only on idle GPUs as "
                             "scavenger work, and no idle GPU fits it now")
        teams = _teams_ahead(ahead)
        if not tree.owed(leaf):
            return "at-share", (
                f"team {name} is at or above its fair share (runs {tree.alloc[leaf]:.0f} GPUs, entitled to "
                f"{tree.entitled[leaf]:.1f} now); {teams}; it starts when GPUs free up and the teams below their "
                "share are served")
        if tree.slack_too_small(leaf, 1):
            return "claim-band", (
                f"no free GPUs fit it now; {self._below_share(leaf)} but beyond its nominal share "
                f"({tree.nominal[leaf]:.1f} GPUs) and owed less than {self.cfg.claim_band:.0%} of its share: it "
                "is served first as GPUs free up, without preempting (that part of its share moves as other "
                f"teams' demand changes); {teams}")
        when = self._reclaim_when(leaf)
        return "reclaim-wait" if when else "below-share", (
            f"no free GPUs fit it now; {self._below_share(leaf)} and is served first as GPUs free up; {teams}; "
            f"after {_mins(self.cfg.preempt_after_s)} of waiting{when}, jobs past their protected time may be "
            "preempted for it")

    def _promises_claims(self, leaf: str) -> bool:
        """Does the reason of an in-budget team (``_leaf_reason``) say that jobs may be preempted for its jobs?"""
        tree = self.tree
        return tree.owed(leaf) and not tree.slack_too_small(leaf, 1)

    def _beyond_claim_reason(self, job: PendingJob, leaf: str, ahead: int) -> str:
        """Why a job larger than its team may claim waits: no running job is preempted for it (``may_claim``)."""
        tree = self.tree
        owed = tree.entitled[leaf] - tree.alloc[leaf]
        return (f"no free GPUs fit it now; {self._below_share(leaf)}, but this job asks for {job.gpus} GPUs, more "
                f"than its team may claim from other teams now (it is owed {owed:.1f}): no running job is preempted "
                f"for it. It starts when {job.gpus} GPUs free up together, or may claim them once its team is owed "
                f"at least half of it or runs no other batch work; {_teams_ahead(ahead)}")

    def _reclaim_when(self, leaf: str) -> str:
        """The part of its share the team must still go without before it may preempt (the cycle's
        ``_short_long_enough``)."""
        short = self.tree.entitled[leaf] - self.tree.alloc[leaf]
        if short <= 0 or self._short_long_enough(leaf):
            return ""
        need, gone = self.cfg.reclaim_after_gpu_s, self.shortfall.teams.get(leaf, (0.0, 0.0))[0]
        return (f", and once team {display(leaf)} has gone without {need / 3600:.1f} GPU-hours of its share "
                f"({gone / 3600:.1f} so far: about {_mins((need - gone) / short)} more at {short:.0f} GPUs short)")

    def _below_share(self, leaf: str) -> str:
        tree = self.tree
        return (f"team {display(leaf)} is below its fair share (runs {tree.alloc[leaf]:.0f} of "
                f"{tree.entitled[leaf]:.1f} entitled GPUs)")

    def _failed_plan_reason(self, job: PendingJob, rank: dict[str, int]) -> str:
        """Why a job whose preemption plan failed this cycle waits: no running job could make room for it."""
        leaf = self.tree.leaf[job.team]
        nodes = f"{job.gpu_type} nodes" if job.gpu_type else "nodes"
        gpus = f"{job.gpus} GPU{'s' if job.gpus != 1 else ''}"
        return (f"no free GPUs fit it now and none can be freed for it: on the {nodes} that could hold its {gpus}, "
                "the running jobs are inside their protected time, belong to teams that would fall below their fair "
                "share, or are its own team's (never preempted for its batch jobs); "
                f"{self._below_share(leaf)} and is served first as GPUs free up; "
                f"{_teams_ahead(rank.get(leaf, 0))}{self._starved_turn_when(job, leaf)}")

    def _starved_turn_when(self, job: PendingJob, leaf: str) -> str:
        """When a job of one node of a team that runs no batch work gets its turn (§7), or nothing."""
        batch = self.queues[2].get(leaf)
        if (not self.cfg.gang_turns or self.snap.shortfall is None  # (no shortfall kept: no turn is ever paid)
                or batch is None or batch.jobs[0].id != job.id or not self._starved_one_node(job, leaf)):
            return ""
        # the later of its day's wait and its team's wait paying for the protected run it buys (turns.py)
        owed = max(0.0, self.tree.entitled[leaf] - self.tree.alloc[leaf])
        gone = self.shortfall.teams.get(leaf, (0.0, 0.0))[0]
        left = max(STARVED_TURN_WAIT_S - (self.now - job.submit_s),
                   (self._turn_price_s(job, leaf) - gone) / owed if owed > 0 else 0.0)
        when = f"in about {_mins(left)}" if left > 0 else "once no other turn is under way"
        return ("; while its team runs no batch work, it gets a turn (a node freed for it, its jobs preempted once "
                f"out of their protected time) {when}")

    def _debug_reason(self, job: PendingJob) -> str:
        """Why a debug session waits, and when a job that could yield for it leaves its protected time."""
        tree = self.tree
        if tree.spent[job.team]:
            return ("budget spent: a session of a team whose GPU-hours are used up takes only free GPUs, GPUs lent "
                    "out of the debug pool, or other out-of-budget work, and none is free or can be taken now")
        ends = self.debug_ends
        if ends is None:
            ends = self.debug_ends = self._debug_ends_table()
        leaf, t = tree.leaf[job.team], job.gpu_type
        first = min(ends.get((leaf, t), math.inf), ends.get((None, t), math.inf))
        when = (f"; the first job that could yield for it leaves its protected time in {_mins(first - self.now)}"
                if first < math.inf else "")
        pool = "the debug pool is in use, and " if self.index.has_pool else ""
        return (f"no GPU is free for this {job.gpus}-GPU session and none can be freed now: {pool}the jobs of its "
                f"team and of teams above their share are inside their protected time{when}; it starts as soon as "
                "GPUs free up")

    def _debug_ends_table(self) -> dict[tuple, float]:
        """When the first protected job that could yield for a session leaves its protection, in one pass over the
        jobs inside their protected time: per (team, GPU type) for the team's own jobs, per (None, GPU type) for the
        jobs of teams whose batch work is above their share; GPU type None: any type."""
        tree, gtype = self.tree, self.index.gtype
        over = {a for a in self.preemptor.leaves if tree.batch_alloc(a) > tree.entitled[a] + 1e-9}
        ends: dict[tuple, float] = {}
        for r, _, p in self.protected:
            leaf = tree.leaf[r.team]
            t = gtype.get(r.placement[0][0])
            keys = [(leaf, t), (leaf, None)]
            if leaf in over:
                keys += [(None, t), (None, None)]
            for k in keys:
                if p < ends.get(k, math.inf):
                    ends[k] = p
        return ends

    def _res_reason(self, job: PendingJob, res: Reservation) -> str:
        nodes = placement_str(res.placement)
        what = f"{job.gpus} {job.gpu_type or ''} GPUs".replace("  ", " ")
        if res.kind in ("hold", "turn-hold"):
            left = res.expires_s - HOLD_SLACK_S - self.now  # the victims' grace still to run
            return (f"{what} on {nodes} are held for it while preempted jobs checkpoint "
                    + (f"(at the latest in {_mins(left)})" if left > 0 else
                       "(their grace is over: they stop any moment now)"))
        if res.kind == "turn-wait":
            return (f"its turn is paid (it needs more GPUs than its team is owed, and its team has gone without enough "
                    f"of its share); it waits for a moment when {nodes} or other nodes can be freed for it within its "
                    "protected time, or until it has waited a day, and then reserves them")
        if res.kind == "turn":
            return (f"its turn: it needs more GPUs than its team is owed, and its team's wait has paid for its "
                    f"protected time; nodes {nodes} are reserved for it (their free GPUs are lent as borrowed "
                    "work until its last half hour); the jobs still on them are preempted for it once none is in "
                    "its protected time")
        have = sum(self.claims.get(job.id, {}).values())
        if self.contract(job.contract).queue == DEBUG:
            return (f"waiting for {what} on one machine: everything it could take is in its protected time; {nodes} "
                    f"is kept for it as the jobs there end ({have} of {job.gpus} GPUs free so far)")
        return (f"waiting for {what} on whole nodes; reserved nodes {nodes} ({have} of {job.gpus} GPUs free so far) "
                "are kept for it as running jobs end; small jobs may not use them")
