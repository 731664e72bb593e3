"""Preemption: gang-aware victim selection for one pending job, and node drains.

A victim must be (docs/policy.md, "Preemption"):
- running, not already preempting, not a debug session, on a healthy node of the job's GPU type that no other
  job's reservation claims;
- started as scavenger work (no protection at all), or past its contract's protected time (KAI Scheduler's
  *min-runtime*) and of a team that stays at or above its entitlement (no ping-pong: the requester must itself
  stay within its entitlement + 0.5 GPU, so the reverse preemption is impossible). Teams, the tree's leaves, are
  what is checked; their entitlements are water-filled down the hierarchy. A team's own non-scavenger jobs are
  never victims for its batch jobs; its debug sessions, first in the team's own order, may take them past
  protection.

Victims are chosen node by node so that whole nodes free up for gangs: for each node, the cheapest victims that
free the GPUs the job needs there (victim order: scavenger first, then the team furthest above its entitlement,
then the least work lost since the last checkpoint; superfluous victims are dropped again), and the nodes with the
cheapest victim sets win (fewest in-budget victims, then least lost GPU-seconds, then fewest victims; for debug
sessions the shortest grace, then the fewest GPUs their teams are left below their shares, then the fewest victims,
come before lost work).

``protected_until`` says when a running job may first be taken (its protected time, none for borrowed or spent
work, a minimum run time for repeat victims); ``build_victims`` turns the takeable jobs into the planner's victims.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .fairshare import TeamTree
from .placement import FreeIndex, node_needs
from .types import Contract, Placement, notice_s

EPS = 1e-9
HOLD_SLACK_S = 600.0  # a hold outlives its victims' grace by this much, then it is dropped
# Borrowed work whose team holds at least this fraction of it above the team's share may be preempted when the
# GPUs it frees beyond the requester's job go to other teams below their shares (see Preemptor._team_ok_uncached).
SPILL_SURPLUS = 0.75
# Borrowed work of a job that has run before may be taken only after this long (at most its contract's protected
# time): a requeued job is not stopped again minutes after every restart.
REPEAT_MIN_RUN_S = 600.0


@dataclass(slots=True)
class Victim:
    id: str
    team: str
    gpus: int
    placement: Placement
    scavenger: bool
    protected_until: float
    lost_gpu_s: float
    grace_s: int
    counted: bool = True  # its team is in budget: its GPUs count against the team's entitlement
    loan: bool = False  # borrowed work on debug-pool GPUs: a debug session may always take it back
    team_leaf: str = ""


def _kept(v: Victim) -> int:
    """1 for in-budget work started within its team's share, which a plan stops last; 0 for borrowed work and for
    the work of a team whose budget is spent (DESIGN §4.2: scavenger work, whatever it started as)."""
    return 1 if v.counted and not v.scavenger else 0


def protected_until(r, c: Contract, spent: dict[str, bool], pool: dict[str, bool]) -> float | None:
    """When a running job may first be taken: the end of its contract's protected time, or None (at once) for
    work with none: started as scavenger (borrowed), or of a team whose budget is spent (DESIGN §4.2: always
    preemptible, whatever contract it started under). But borrowed work of a job that has run before (a requeued
    victim) is kept for ``REPEAT_MIN_RUN_S``, at most its contract's protected time, as KAI's min-runtime but for
    repeat victims only: without it a job of a team far below its share restarts as borrowed work on the next GPUs
    that free, and is the cheapest victim again minutes later, time after time. The time does not grow with the
    job's runs: such a job is mostly beyond its team's share, and kept for an hour or more it holds GPUs that teams
    owed them cannot take back. A spent team's work and a loan of debug-pool GPUs (``pool``: node -> in the pool)
    stay takeable at once."""
    if spent[r.team]:
        return None
    if r.scavenger:
        if not r.runs or any(pool.get(n, False) for n, _ in r.placement):
            return None
        return r.started_s + min(c.protected_s, REPEAT_MIN_RUN_S)
    return r.started_s + c.protected_s


def build_victims(takeable: list[tuple], now: float, index: FreeIndex, scavenger: Contract | None) -> list[Victim]:
    """The running jobs a preemption plan may take, as the planner sees them: ``takeable`` holds (running job,
    contract, in budget, ``protected_until``) of the jobs that have no protected time or are past it (the others
    are of no use to a plan: the waiting reasons read them from the cycle's ``protected``). Built only when a cycle
    plans (many do not); everything read here is fixed for the cycle (budgets spent, the debug pool, the clock).
    ``scavenger``: the scavenger contract, whose grace caps the notice of work started as scavenger (``notice_s``)."""
    pool, has_pool = index.pool, index.has_pool
    out = []
    append = out.append
    for r, c, counted, until in takeable:
        scav = r.scavenger
        grace = notice_s(r, c, scavenger)
        started = r.started_s
        ckpt = r.last_checkpoint_s
        since = now - (ckpt if ckpt is not None and ckpt > started else started)  # since the last checkpoint
        append(Victim(r.id, r.team, r.gpus, r.placement, scav, started if until is None else until,
                      r.gpus * since if since > 0 else 0.0, grace, counted,
                      scav and has_pool and any(pool[n] for n, _ in r.placement)))
    return out


class Preemptor:
    """Plans victim sets against the current allocation of ``tree`` and the free GPUs of ``index``."""

    def __init__(self, now: float, tree: TeamTree, index: FreeIndex, victims: Callable[[], list[Victim]]) -> None:
        """``victims`` returns the running jobs to consider (debug sessions are left out; jobs inside their
        protected time may be, as they are never taken); it is called on first need, so that a cycle that plans
        nothing never builds them."""
        self.now = now
        self.tree = tree
        self.index = index
        self._victims = victims
        self._by_id: dict[str, Victim] | None = None
        # per node: the victims that could be taken this cycle (scavengers + jobs past protection) with their GPUs
        # there, and the GPUs they hold there: a node short of that is skipped at once
        self.ok: dict[str, list[tuple[Victim, int]]] = {}
        self.room: dict[str, int] = {}
        self._classes: dict[tuple, tuple[Victim, set[str]]] | None = None  # see _victim_classes
        self.only_scavengers = False
        self.gain = 0.0
        self.req_may_claim = True
        self.leaves = set(tree.leaf.values())
        self.taken: set[str] = set()  # victims already chosen in this plan
        self.blocked_nodes: set[str] = set()  # nodes claimed by a reservation
        # per node: the takeable victims in preference order (batch and debug requesters), filled lazily
        self.sorted: dict[tuple[str, bool], list[tuple[Victim, int]]] = {}

    def _index_victims(self) -> dict[str, Victim]:
        """Build, on first use, the victims by id and, per node, the takeable ones (``ok``) and their GPUs
        (``room``)."""
        if self._by_id is None:
            by_id: dict[str, Victim] = {}
            leaf, now, cap, ok, room = self.tree.leaf, self.now, self.index.cap, self.ok, self.room
            for v in self._victims():
                v.team_leaf = leaf[v.team]
                by_id[v.id] = v
                if v.scavenger or now >= v.protected_until:
                    for n, k in v.placement:
                        if n in cap:
                            held = ok.get(n)
                            if held is None:
                                ok[n] = [(v, k)]
                                room[n] = k
                            else:
                                held.append((v, k))
                                room[n] += k
            self._by_id = by_id
        return self._by_id

    def _sorted(self, node: str, debug: bool) -> list[tuple[Victim, int]]:
        key = (node, debug)
        out = self.sorted.get(key)
        if out is None:
            out = self.sorted[key] = sorted(self.ok.get(node, ()), key=lambda vk: self._order(vk[0], debug))
        return out

    def _order(self, v: Victim, debug: bool) -> tuple:
        tree = self.tree
        leaf = tree.leaf[v.team]
        ent = tree.entitled[leaf]
        over = tree.alloc[leaf] / ent if ent > 0 else float("inf")
        if debug:
            return (_kept(v), v.grace_s, -over, v.lost_gpu_s, v.id)
        return (_kept(v), -over, v.lost_gpu_s, v.id)

    def _team_ok(self, v: Victim, req_team: str | None, gpus: int, freed: dict[str, float]) -> bool:
        """Would taking ``v`` keep every affected level at/above entitlement, and the requester within its own?"""
        if not v.counted:
            return True  # out-of-budget work: its team is entitled to nothing
        if not freed:
            key = (v.team, v.gpus, v.scavenger)
            hit = self._ok_cache.get(key)
            if hit is None:
                hit = self._ok_cache[key] = self._team_ok_uncached(v, req_team, gpus, freed)
            return hit
        return self._team_ok_uncached(v, req_team, gpus, freed)

    def _team_ok_uncached(self, v: Victim, req_team: str | None, gpus: int, freed: dict[str, float]) -> bool:
        """The share checks, on the teams themselves (the leaves of the tree, whose entitlements are water-filled
        down the hierarchy): the victim's team stays at or above its entitlement (or the lumpy-surplus trade holds)
        and the requester's team may claim the job. Groups are not checked on their own: a group's entitlement is
        the sum of its teams', so the leaf checks are what the impact metric counts, and checking groups too left
        a team below its share waiting while a team of another group sat above its own (docs/policy.md, §6)."""
        tree = self.tree
        a = tree.leaf[v.team]
        after = tree.batch_alloc(a) - freed.get(a, 0.0) - v.gpus  # its debug sessions' GPUs left out
        if after < tree.entitled[a] - EPS:
            # Surplus comes in job-sized lumps (a team 7 GPUs above its share in 8-GPU jobs): leaving the victim's
            # team below its share is allowed when the requester gains clearly more than all the victims' teams
            # lose below theirs (the plan's net effect on impact is positive). The reverse move would lose more
            # than it gains, so it is never planned: no ping-pong.
            if self.gain <= 0:
                return False
            short = self._shortfall(freed) + (tree.entitled[a] - after) - max(
                0.0, tree.entitled[a] - (tree.alloc[a] - freed.get(a, 0.0)))
            # Borrowed work: the GPUs it frees beyond the requester's job go to the teams below their shares (the
            # walk serves them first), up to what they are owed, and count as gain too: the requester's own team's
            # next jobs, within what it is owed beyond this one, always (borrowed work has no guarantee, and the
            # team is the first served); the other teams' when the lump is mostly above its team's share (a lump of
            # 8 GPUs on a team entitled to 3).
            gain = self.gain
            if v.scavenger:
                spill = max(0.0, sum(freed.values()) + v.gpus - gpus)
                owed = self.req_further
                if tree.alloc[a] - freed.get(a, 0.0) - tree.entitled[a] >= SPILL_SURPLUS * v.gpus:
                    owed += self.owed_elsewhere
                gain += min(spill, owed)
            if short > gain - 1.0 + EPS:
                return False
        return self.req_may_claim

    def _shortfall(self, freed: dict[str, float]) -> float:
        """GPUs the victims' teams chosen so far are left below their shares (leaf level)."""
        tree = self.tree
        return sum(max(0.0, tree.entitled[a] - (tree.alloc[a] - f)) for a, f in freed.items())

    def _node_plan(self, node: str, need: int, extra: int, req_team: str | None, req_leaf: str | None,
                   gpus: int, debug: bool, freed: dict[str, float]):
        have = self.index.avail[node] + extra
        if have >= need:
            return (0, 0, 0.0, 0.0, 0, node), []
        missing = need - have
        if self.room.get(node, 0) < missing:
            return None
        chosen: list[Victim] = []
        shares: list[int] = []
        local = None
        got = 0
        for v, share in self._sorted(node, debug):
            if not self._admissible(v, req_team, req_leaf, gpus, debug, freed if local is None else local):
                continue
            if self._counts_against_team(v, req_leaf, debug):
                if local is None:
                    local = dict(freed)
                local[v.team_leaf] = local.get(v.team_leaf, 0.0) + v.gpus
            chosen.append(v)
            shares.append(share)
            got += share
            if got >= missing:
                break
        if got < missing:
            return None
        for i in range(len(chosen) - 2, -1, -1):  # drop victims the later ones made superfluous
            if got - shares[i] >= missing:
                got -= shares[i]
                del chosen[i]
                del shares[i]
        if not debug:
            return (sum(map(_kept, chosen)), 0, 0.0, sum(v.lost_gpu_s for v in chosen),
                    len(chosen), node), chosen
        best = self._debug_score(chosen, node)
        if len(chosen) > 1:
            # a session stops as few jobs as it can: one job that frees enough alone beats several small ones
            for v, share in self._sorted(node, debug):
                if share >= missing and self._admissible(v, req_team, req_leaf, gpus, debug, freed):
                    one = self._debug_score([v], node)
                    if one < best:
                        best, chosen = one, [v]
                    break
        return best, chosen

    def _debug_score(self, chosen: list[Victim], node: str) -> tuple:
        """A debug session's node cost: in-budget victims, then the longest grace (its wait), then the GPUs the
        victims' teams are left below their shares (a loan of a team below its share, taken back, sends that team
        to claim GPUs from another: a second job stopped; the session's own team's GPUs count too, which steers a
        session off its team's work, measured better, docs/policy-history.md §6), then jobs stopped, then work lost."""
        took: dict[str, float] = {}
        for v in chosen:
            if v.counted:
                took[v.team_leaf] = took.get(v.team_leaf, 0.0) + v.gpus
        short = self._shortfall(took) - self._shortfall(dict.fromkeys(took, 0.0))
        return (sum(map(_kept, chosen)), max((v.grace_s for v in chosen), default=0), short,
                len(chosen), sum(v.lost_gpu_s for v in chosen), node)

    def _counts_against_team(self, v: Victim, req_leaf: str | None, debug: bool) -> bool:
        """Does taking ``v`` lower a team's allocation that the share checks must follow?"""
        return v.counted and not (debug and (v.loan or v.team_leaf == req_leaf))

    def _admissible(self, v: Victim, req_team: str | None, req_leaf: str | None, gpus: int, debug: bool,
                    freed: dict[str, float]) -> bool:
        """May ``v`` be taken for this requester, given what the plan has ``freed`` so far?

        Never a team's own work for its batch job; a debug session comes first in its team's own order, so it
        may take its team's work (past protection) whatever the team's share: the GPUs stay the team's. An
        out-of-budget requester (a debug session) takes only out-of-budget work and loans of debug-pool GPUs
        (the pool exists for sessions, whoever's they are)."""
        return v.id not in self.taken and self._class_admissible(v, req_team, req_leaf, gpus, debug, freed)

    def _class_admissible(self, v: Victim, req_team: str | None, req_leaf: str | None, gpus: int, debug: bool,
                          freed: dict[str, float]) -> bool:
        """``_admissible`` but for ``taken``: what every victim of ``v``'s class shares."""
        if self.only_scavengers and v.counted and not v.loan:
            return False
        if v.team_leaf == req_leaf and not debug:
            return False
        if self._counts_against_team(v, req_leaf, debug):
            return self._team_ok(v, req_team, gpus, freed)
        return True

    def _victim_classes(self) -> dict[tuple, tuple[Victim, set[str]]]:
        """The takeable victims by class (every field the share checks read: all of a class pass or fail them
        together before a plan has freed anything): a representative and the nodes the class holds GPUs on. Built
        on the first plan of a cycle (many cycles make none)."""
        if self._classes is None:
            self._classes = {}
            for node, held in self.ok.items():
                for v, _ in held:
                    key = (v.team, v.gpus, v.scavenger, v.counted, v.loan)
                    entry = self._classes.get(key)
                    if entry is None:
                        entry = self._classes[key] = (v, set())
                    entry[1].add(node)
        return self._classes

    def _promising(self, req_team: str | None, req_leaf: str | None, gpus: int, debug: bool) -> set[str]:
        """The nodes holding a victim that this requester may take before its plan has freed anything. On any
        other node a plan that has freed nothing yet finds no first victim (exact, and O(classes) instead of a
        share check per victim: with 1,024 GPUs most plans fail, each trying every node)."""
        out: set[str] = set()
        every = len(self.ok)  # the nodes that hold any takeable victim
        for rep, nodes in self._victim_classes().values():
            if len(out) == every:
                break  # (a class whose nodes are all in already cannot change the answer: its check is spared)
            if nodes <= out:
                continue
            if self._class_admissible(rep, req_team, req_leaf, gpus, debug, {}):
                out |= nodes
        return out

    def plan(self, gpus: int, gpus_per_node: int | None, gpu_type: str | None, req_team: str,
             debug: bool, pools: tuple[bool, ...], own_claims: dict[str, int], only_scavengers: bool = False):
        """Best (placement, victims) for the job, or None. ``own_claims``: GPUs already held for it per node.

        ``only_scavengers``: victims must be out-of-budget work or debug-pool loans (a debug session of an
        out-of-budget team)."""
        self._index_victims()
        self.only_scavengers = only_scavengers
        tree = self.tree
        req_leaf = tree.leaf[req_team]
        check_team = None if debug else req_team
        # what the requester gains towards its share: the most the victims' teams may lose below theirs
        self.gain = 0.0 if debug else min(gpus, max(0.0, tree.entitled[req_leaf] - tree.alloc[req_leaf]))
        # what it is owed beyond this job (its next jobs take GPUs freed beyond it: an entitlement never exceeds the
        # team's demand, so it has the jobs)
        self.req_further = 0.0 if debug else max(0.0, tree.entitled[req_leaf] - tree.alloc[req_leaf] - gpus)
        # what the other teams below their shares are owed (where GPUs freed beyond the job's need go)
        self.owed_elsewhere = 0.0 if debug else sum(
            max(0.0, tree.entitled[b] - tree.alloc[b]) for b in self.leaves if b != req_leaf)
        self._ok_cache: dict[tuple[str, int, bool], bool] = {}  # team checks against an empty ``freed``
        # the requester's side of the share checks (the tree does not change while a plan is made)
        self.req_may_claim = check_team is None or tree.team_may_claim(check_team, gpus)
        promising = None
        best = None
        for t in self.index.types if gpu_type is None else [gpu_type]:
            needs = node_needs(gpus, gpus_per_node, self.index.maxcap[t])
            if needs is None:
                continue
            nodes = self._open_nodes(t, pools, own_claims)
            if len(nodes) < len(needs):
                continue
            # fast reject: everything preemptible plus free on this type is still too little
            room = sum(self.index.avail[n] + own_claims.get(n, 0) + self.room.get(n, 0) for n in nodes)
            if room < gpus:
                continue
            if promising is None:
                promising = self._promising(check_team, req_leaf, gpus, debug)
            found = self._plan_nodes(needs, nodes, own_claims, promising, check_team, req_leaf, gpus, debug)
            if found is not None:
                cand = (found[0], t)
                if best is None or cand < best[0]:
                    best = (cand, found[1], found[2])
        if best is None:
            if debug or gpus_per_node:
                return None
            return self._spread(gpus, gpu_type, req_team, req_leaf, pools, own_claims)
        _, placement, victims = best
        # a victim spanning several chosen nodes would be listed once per node: dedupe, keep order
        seen: set[str] = set()
        unique = [v for v in victims if not (v.id in seen or seen.add(v.id))]
        return placement, unique

    def _plan_nodes(self, needs: list[int], nodes: list[str], own_claims: dict[str, int], promising: set[str],
                    check_team: str | None, req_leaf: str, gpus: int, debug: bool):
        """The cheapest plan on ``nodes`` (one GPU type) for a job needing ``needs`` GPUs on as many nodes, largest
        needs first, each node's victims chosen with what the nodes picked before already freed: (score, placement,
        victims), or None."""
        freed: dict[str, float] = {}
        extra: dict[str, int] = dict(own_claims)
        used: set[str] = set()
        picked: list[tuple[str, int]] = []
        victims: list[Victim] = []
        score_total = [0, 0, 0.0, 0.0, 0]
        counts: dict[int, int] = {}
        for need in needs:
            counts[need] = counts.get(need, 0) + 1
        try:
            for need in sorted(counts, reverse=True):
                options = []
                avail = self.index.avail
                for n in nodes:
                    if n in used or self.index.cap[n] < need:
                        continue
                    if not freed and n not in promising and avail[n] + extra.get(n, 0) < need:
                        continue  # nothing free enough, and no victim a plan could start with
                    p = self._node_plan(n, need, extra.get(n, 0), check_team, req_leaf, gpus, debug, freed)
                    if p is not None:
                        options.append(p)
                options.sort(key=lambda p: p[0])
                got = 0
                for first_score, _ in options:
                    n = first_score[-1]
                    if n in used:
                        continue
                    # re-plan with what the nodes picked before already freed (cheap: one node)
                    p = self._node_plan(n, need, extra.get(n, 0), check_team, req_leaf, gpus, debug, freed)
                    if p is None:
                        continue
                    score, chosen = p
                    used.add(n)
                    picked.append((n, need))
                    for v in chosen:
                        victims.append(v)
                        self.taken.add(v.id)
                        for m, k in v.placement:
                            extra[m] = extra.get(m, 0) + k
                        if v.counted:
                            freed[v.team_leaf] = freed.get(v.team_leaf, 0.0) + v.gpus
                    for i in range(len(score_total)):  # (every column but the node's)
                        score_total[i] += score[i]
                    got += 1
                    if got == counts[need]:
                        break
                if got < counts[need]:
                    return None
        finally:
            for v in victims:
                self.taken.discard(v.id)
        return tuple(score_total), tuple(sorted(picked)), victims

    def _open_nodes(self, gpu_type: str, pools: tuple[bool, ...], own_claims: dict[str, int]) -> list[str]:
        """The nodes of the type (and pools) no other job's reservation blocks: its own reservation's stay open."""
        index = self.index
        return [n for key in index.keys(gpu_type, pools) for n in index.group_nodes[key]
                if n not in self.blocked_nodes or n in own_claims]

    def _spread(self, gpus: int, gpu_type: str | None, req_team: str, req_leaf: str, pools: tuple[bool, ...],
                own_claims: dict[str, int]):
        """A job of free shape for which no packed plan exists may take out-of-budget work wherever it runs: every
        free GPU of one type, then the cheapest such victims on any node, placed in the largest chunks (as its
        placement on free GPUs would be). Out-of-budget work is every team's first victim and costs no team its
        share, yet a team's own jobs scattered over the nodes (its team alone in budget, late in a period) leave no
        node that a packed plan could free (docs/policy.md §6, "Out-of-budget work, wherever it runs")."""
        best = None
        index = self.index
        for t in index.types if gpu_type is None else [gpu_type]:
            nodes = self._open_nodes(t, pools, own_claims)
            have = {n: index.avail[n] + own_claims.get(n, 0) for n in nodes}
            got = sum(have.values())
            takeable: dict[str, Victim] = {}
            for n in nodes:
                for v, _ in self.ok.get(n, ()):
                    if not v.counted and v.id not in self.taken:
                        takeable[v.id] = v
            if got + sum(v.gpus for v in takeable.values()) < gpus:
                continue
            victims: list[Victim] = []
            for v in sorted(takeable.values(), key=lambda v: self._order(v, False)):
                if got >= gpus:
                    break
                if not self._admissible(v, req_team, req_leaf, gpus, False, {}):
                    continue
                victims.append(v)
                for n, k in v.placement:
                    if n in have:
                        have[n] += k
                        got += k
            if got < gpus:
                continue
            placement: list[tuple[str, int]] = []
            left = gpus
            for n in sorted(have, key=lambda n: (-have[n], n)):
                if left == 0 or have[n] == 0:
                    break
                placement.append((n, min(have[n], left)))
                left -= placement[-1][1]
            # keep only the victims whose GPUs the placement needs beyond the free ones (the last chunk may be cut)
            short = {n: k - index.avail[n] - own_claims.get(n, 0) for n, k in placement}
            kept = []
            for v in victims:
                if any(short.get(n, 0) > 0 for n, _ in v.placement):
                    kept.append(v)
                    for n, k in v.placement:
                        if n in short:
                            short[n] -= k
            victims = kept
            score = (len(victims), sum(v.lost_gpu_s for v in victims), len(placement), t)
            if best is None or score < best[0]:
                best = (score, tuple(sorted(placement)), victims)
        return None if best is None else (best[1], best[2])

    def commit(self, victims: list[Victim]) -> None:
        for v in victims:
            self.taken.add(v.id)
