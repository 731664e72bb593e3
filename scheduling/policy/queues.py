"""The pending queue, team by team: queue order, grouping, and what a cycle derives from each team's queue.

A team's queue is in *queue order*: by (rank, submit_s, id). Grouping every pending job by team is the only part of
a cycle that costs O(pending), so it is done once, in one pass, or not at all: a caller that already keeps its
queue per team (the simulator) hands the groups over as ``Snapshot.pending_by_team``, and :class:`QueueCache`
keeps what it derived from each team's tuple for as long as the caller hands over that same tuple (a team whose
queue did not change since the last cycle costs O(1)); a team's new tuple is derived from its last queue
(:meth:`TeamQueue.following`), looking in Python only at the jobs that left or arrived.
"""

from __future__ import annotations

import operator
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import compress, count, islice

from .types import PendingJob

sort_key = operator.attrgetter("rank", "submit_s", "id")  # queue order (C-speed key)
_rank_of = operator.attrgetter("rank")
_submit_of = operator.attrgetter("submit_s")
_id_of = operator.attrgetter("id")
shape_of = operator.attrgetter("gpus", "gpus_per_node", "gpu_type")  # what decides where a job can ever fit
_gpus_of = operator.attrgetter("gpus")
_contract_of = operator.attrgetter("contract")
# TeamQueue.following derives a queue from the last one when at most this many jobs changed (or a sixteenth of
# the queue, if more): beyond that, building it anew is as cheap
DIFF_MIN_CHANGES = 64


def queue_sorted(jobs: Iterable[PendingJob]) -> list[PendingJob]:
    """``sorted(jobs, key=sort_key)``, as stable sorts on one field each (comparing floats or ints is much cheaper
    than comparing key tuples): by id, by submit time, then by rank when the ranks differ. The id sort only orders
    equal submit times, so it is skipped when none are equal (then no string is compared at all); it is kept when
    a submit time is NaN (no order at all), so that the result does not depend on the order the jobs came in."""
    out = list(jobs)
    subs = [j.submit_s for j in out]
    total = sum(subs)
    if total != total or len(set(subs)) != len(subs):
        out.sort(key=_id_of)
    out.sort(key=_submit_of)
    ranks = [j.rank for j in out]
    if ranks and ranks.count(ranks[0]) != len(ranks):
        out.sort(key=_rank_of)
    return out


def in_queue_order(jobs: Sequence[PendingJob]) -> bool:
    """Whether ``jobs`` are already sorted by ``sort_key``: one rank, non-decreasing submit times, ids rising where
    submit times tie. Half the cost of ``sorted`` on a sorted queue, which builds a key tuple per job."""
    n = len(jobs)
    if n < 2:
        return True
    ranks = [j.rank for j in jobs]  # (comprehensions beat map(attrgetter) on CPython 3.11: specialised LOAD_ATTR)
    if ranks.count(ranks[0]) != n:
        return False
    subs = [j.submit_s for j in jobs]
    total = sum(subs)
    if total != total or subs != sorted(subs):
        return False  # out of order, or a NaN submit time (no order at all): the sort decides
    for i in compress(count(), map(operator.eq, subs, islice(subs, 1, None))):
        if jobs[i].id > jobs[i + 1].id:
            return False
    return True


def shared_runs(old: Sequence, new: Sequence, limit: int) -> list[tuple[int, int, int]] | None:
    """The runs of jobs two queues in queue order share, as (start in ``old``, start in ``new``, length), in order;
    None when more than ``limit`` jobs differ. Runs are found by galloping slice comparisons, which run at C speed
    (a tuple or list compares the same object as equal without calling ``__eq__``; two jobs equal in every field
    are the same job to the policy). Where the queues differ, the job first in queue order is the one that left
    (``old``'s) or arrived (``new``'s). The runs are always right: every job outside them counts as one that left
    or arrived, whatever order the queues are in; only their number depends on it."""
    m, n = len(old), len(new)
    runs: list[tuple[int, int, int]] = []
    i = j = changed = 0
    while i < m and j < n:
        k = _common_run(old, i, new, j)
        if k:
            runs.append((i, j, k))
            i += k
            j += k
            continue
        changed += 1
        if changed > limit:
            return None
        a, b = sort_key(old[i]), sort_key(new[j])
        if a < b:
            i += 1  # old[i] left
        elif b < a:
            j += 1  # new[j] arrived
        else:
            i += 1  # another job in the same place (ids are unique: a job requeued in its place)
            j += 1
    if changed + m - i > limit:  # (what is left of ``new`` arrived last, at its end: cheap to take in)
        return None
    return runs


def _common_run(a: Sequence, i: int, b: Sequence, j: int) -> int:
    """The length of the longest run ``a[i:i + k] == b[j:j + k]``: doubling, then halving, at C speed."""
    n = min(len(a) - i, len(b) - j)
    if n <= 0 or a[i] is not b[j]:
        return 0
    lo, step = 1, 1  # a[i:i + lo] == b[j:j + lo]
    hi = n + 1
    while lo < n:
        top = min(n, lo + step)
        if a[i + lo:i + top] == b[j + lo:j + top]:
            lo = top
            step *= 2
        else:
            hi = top
            break
    while hi - lo > 1:  # the run ends in [lo, hi)
        mid = (lo + hi) // 2
        if a[i + lo:i + mid] == b[j + lo:j + mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _spliced(values: list, runs: list[tuple[int, int, int]], jobs: Sequence[PendingJob], fn: Callable) -> list:
    """The list of ``fn(job)`` for ``jobs``, from ``values``, the same list of the queue ``runs`` were found
    against: the runs' values are copied (at C speed), only the jobs between them are looked at."""
    out: list = []
    j = 0
    for a, b, k in runs:
        if b > j:
            out.extend([fn(x) for x in jobs[j:b]])
        out.extend(values[a:a + k])
        j = b + k
    out.extend([fn(x) for x in jobs[j:]])
    return out


def _carried(counts: Counter | None, asked: object, values: Callable[[], list]) -> Counter | None:
    """A queue's counts per value for the queue that follows it: those it kept, or, where it was asked for the
    values but counted none (it was built anew), counted now, once (the next queue will be asked too)."""
    if counts is not None or asked is None:
        return counts
    return Counter(values())


def _recount(counts: Counter | None, left: list, came: list, key: Callable) -> Counter | None:
    """``counts`` (per value of ``key``) less the jobs that left, plus those that arrived; None stays None."""
    if counts is None:
        return None
    out = counts.copy()
    for x in left:
        v = key(x)
        if out[v] == 1:
            del out[v]
        else:
            out[v] -= 1
    out.update(map(key, came))
    return out


class TeamQueue:
    """One team's pending jobs in queue order, with their GPU counts (``gpus[i]`` is ``jobs[i].gpus``).

    What the cycle asks of a queue beyond its jobs and GPU counts is derived on first use and kept with it: the
    distinct sizes, contracts and shapes, and the ids. A queue that follows another (:meth:`following`) keeps
    counts per value of the first three, so that the next one can update them."""

    __slots__ = ("jobs", "gpus", "demand", "_contracts", "_ids", "_split", "_at_type", "_sizes", "_shapes",
                 "_sorted_sizes", "_contract_set", "_shape_set")

    def __init__(self, jobs: Sequence[PendingJob], gpus: list[int] | None = None) -> None:
        """``gpus``, when given, must be the jobs' GPU counts (a split passes them on)."""
        self.jobs = jobs
        self.gpus = [j.gpus for j in jobs] if gpus is None else gpus
        self.demand = sum(self.gpus)
        self._contracts: Counter | None = None  # contract -> jobs under it (kept by following queues)
        self._ids: list[str] | None = None
        self._split: tuple | None = None
        self._at_type: dict[str | None, list[int]] | None = None
        self._sizes: Counter | None = None  # GPU count -> jobs asking for it (likewise)
        self._shapes: Counter | None = None  # shape -> jobs of it (likewise)
        self._sorted_sizes: list[int] | None = None
        self._contract_set: frozenset[str] | None = None
        self._shape_set: frozenset[tuple] | None = None

    @classmethod
    def following(cls, prev: TeamQueue, jobs: Sequence[PendingJob]) -> TeamQueue:
        """The queue of ``jobs``, derived from ``prev`` (:meth:`changed_from`)."""
        return cls.changed_from(prev, jobs)[0]

    @classmethod
    def changed_from(cls, prev: TeamQueue, jobs: Sequence[PendingJob]
                     ) -> tuple[TeamQueue, Sequence[PendingJob], Sequence[PendingJob]]:
        """The queue of ``jobs``, derived from ``prev``, the same team's queue a cycle before: the runs of jobs the
        two share (found at C speed, :func:`shared_runs`) keep what ``prev`` derived for them, and only the jobs
        that left or arrived are looked at. From one cycle to the next a team's queue loses the jobs that started
        and gains those submitted or requeued, a few of thousands: this copies the kept values at C speed and takes
        O(changes x log n) Python steps, where building anew takes O(n) (on a month of a 1,024-GPU lab, queues of
        5,000 jobs each, 54,000 times). The result is the same as ``TeamQueue(jobs)``; past many changes it is built
        that way. Returns (the queue, the jobs of ``prev`` not in it, its jobs not in ``prev``)."""
        old = prev.jobs
        runs = shared_runs(old, jobs, max(DIFF_MIN_CHANGES, len(jobs) // 16))
        if runs is None:
            return cls(jobs), old, jobs
        left: list[PendingJob] = []  # jobs of prev not in jobs
        came: list[PendingJob] = []  # jobs of jobs not in prev
        i = j = 0
        for a, b, k in runs:
            left.extend(old[i:a])
            came.extend(jobs[j:b])
            i, j = a + k, b + k
        left.extend(old[i:])
        came.extend(jobs[j:])
        q = cls.__new__(cls)
        q.jobs = jobs
        q.gpus = _spliced(prev.gpus, runs, jobs, _gpus_of)
        q.demand = prev.demand - sum([x.gpus for x in left]) + sum([x.gpus for x in came])
        q._at_type = q._sorted_sizes = q._contract_set = q._shape_set = q._split = None
        contracts = _carried(prev._contracts, prev._contract_set, lambda: [x.contract for x in old])
        q._contracts = _recount(contracts, left, came, _contract_of)
        q._sizes = _recount(_carried(prev._sizes, prev._sorted_sizes, lambda: prev.gpus), left, came, _gpus_of)
        shapes = _carried(prev._shapes, prev._shape_set, lambda: [(x.gpus, x.gpus_per_node, x.gpu_type) for x in old])
        q._shapes = _recount(shapes, left, came, shape_of)
        q._ids = None  # (only the portal's look-ups by id read them, on queues it builds anew: made if asked)
        if prev._split is not None:
            contracts, inside, outside, mask = prev._split
            # Carried only while jobs under those contracts wait: a team's queue is split when a debug session of
            # it waits, and the session starts within a cycle or two, while its batch queue may wait for days
            # (splitting it every cycle regardless took a fifth of a replay with sessions). When asked again,
            # ``split`` makes it in one pass.
            if q._contracts is None or not contracts.isdisjoint(q._contracts):
                q._split_by(contracts, _spliced(mask, runs, jobs, lambda x: x.contract in contracts), inside,
                            outside)
        return q, left, came

    def sizes(self) -> list[int]:
        """The distinct GPU counts the queue's jobs ask for, ascending (at C speed; kept with the queue)."""
        if self._sorted_sizes is None:
            self._sorted_sizes = sorted(set(self.gpus) if self._sizes is None else self._sizes)
        return self._sorted_sizes

    def shapes(self) -> frozenset[tuple]:
        """The distinct job shapes (``shape_of``) of the queue (kept with the queue; a comprehension builds the
        key tuples 40% faster than ``map(shape_of, ...)``)."""
        if self._shape_set is None:
            self._shape_set = frozenset({(j.gpus, j.gpus_per_node, j.gpu_type) for j in self.jobs}
                                        if self._shapes is None else self._shapes)
        return self._shape_set

    def next_not_of(self, i: int, types: set[str]) -> int | None:
        """The first position ``>= i`` whose job asks for none of these GPU types (a job of any type counts as
        none of them), or None. O(types x log n): the positions of each type are kept with the queue."""
        at_type = self._at_type
        if at_type is None:
            at_type = self._at_type = {}
            for k, j in enumerate(self.jobs):
                at_type.setdefault(j.gpu_type, []).append(k)
        best = None
        for t, positions in at_type.items():
            if t in types:
                continue
            k = bisect_left(positions, i)
            if k < len(positions) and (best is None or positions[k] < best):
                best = positions[k]
        return best

    def contracts(self) -> frozenset[str]:
        if self._contract_set is None:
            self._contract_set = frozenset({j.contract for j in self.jobs} if self._contracts is None
                                           else self._contracts)
        return self._contract_set

    def ids(self) -> list[str]:
        if self._ids is None:
            self._ids = [j.id for j in self.jobs]
        return self._ids

    def split(self, contracts: frozenset[str]) -> tuple[TeamQueue, TeamQueue]:
        """(the jobs under these contracts, the others), each a queue in queue order; kept with this queue (and
        carried over to the queue that follows it, :meth:`following`)."""
        if self._split is None or self._split[0] != contracts:
            self._split_by(contracts, [j.contract in contracts for j in self.jobs])  # the one pass
        return self._split[1], self._split[2]

    def _split_by(self, contracts: frozenset[str], mask: list[bool], prev_inside: TeamQueue | None = None,
                  prev_outside: TeamQueue | None = None) -> None:
        """The split by ``mask`` (True: under ``contracts``), at C speed; each side follows its ``prev`` if any."""
        parts = []
        for m, prev in ((mask, prev_inside), (list(map(operator.not_, mask)), prev_outside)):
            jobs = list(compress(self.jobs, m))
            parts.append(TeamQueue(jobs, list(compress(self.gpus, m))) if prev is None
                         else TeamQueue.following(prev, jobs))
        self._split = (contracts, parts[0], parts[1], mask)


def group(pending: Iterable[PendingJob]) -> dict[str, TeamQueue]:
    """Every team's queue, by team name: one pass buckets the jobs by team, then each team's jobs are sorted into
    queue order unless they already are in it (sorting each team's jobs apart costs a smaller log factor than
    sorting all of them)."""
    jobs_of: dict[str, list[PendingJob]] = {}
    for j in pending:
        q = jobs_of.get(j.team)
        if q is None:
            q = jobs_of[j.team] = []
        q.append(j)
    return {team: TeamQueue(jobs if in_queue_order(jobs) else queue_sorted(jobs))
            for team, jobs in sorted(jobs_of.items())}


class QueueCache:
    """:class:`TeamQueue` of each team's tuple of ``Snapshot.pending_by_team``, kept from one cycle to the next
    while the caller hands over the same tuple object for the team (tuples are immutable, so the same object means
    the same queue; the kept queue holds its tuple, so its id is never reused meanwhile), and derived from the
    team's last queue when the tuple changed. Only the last cycle's queues are kept. ``by_id`` holds every job of
    them by id, updated with the jobs that left or arrived (:class:`JobsById` reads it instead of building a dict
    of every pending job each cycle)."""

    def __init__(self) -> None:
        self._team: dict[str, TeamQueue] = {}  # the last cycle's queue of each team
        self.by_id: dict[str, PendingJob] = {}

    def queues(self, groups: Mapping[str, Sequence[PendingJob]]) -> dict[str, TeamQueue]:
        before = self._team
        out: dict[str, TeamQueue] = {}
        left: list[Sequence[PendingJob]] = [prev.jobs for team, prev in before.items() if not groups.get(team)]
        came: list[Sequence[PendingJob]] = []
        for team in sorted(groups):
            jobs = groups[team]
            if not jobs:
                continue
            q = prev = before.get(team)
            if prev is None:
                q = TeamQueue(jobs)
                came.append(jobs)
            elif prev.jobs is not jobs:
                q, gone, new = TeamQueue.changed_from(prev, jobs)
                left.append(gone)
                came.append(new)
            out[team] = q
        by_id = self.by_id
        for jobs in left:  # all that left first: a job may move to another team's queue (a caller's snapshots
            for x in jobs:  # need not follow one another)
                by_id.pop(x.id, None)
        for jobs in came:
            for x in jobs:
                by_id[x.id] = x
        self._team = out
        return out


class JobsById(Mapping):
    """The pending jobs by id (ids are unique). With a :class:`QueueCache`'s ``by_id`` (the simulator's path) it
    reads that. Without (the portal's), a cycle looks up only the few jobs its reservations name: the first
    ``SCANS`` look-ups scan the queues' id lists at C speed; more look-ups, or iteration, build a dict of every
    pending job."""

    SCANS = 8

    def __init__(self, queues: Iterable[TeamQueue], by_id: dict[str, PendingJob] | None = None) -> None:
        self.queues = list(queues)
        self.scans = 0
        self.by_id = by_id

    def __getitem__(self, job_id: str) -> PendingJob:
        if self.by_id is None and self.scans < self.SCANS:
            self.scans += 1
            for q in self.queues:
                try:
                    return q.jobs[q.ids().index(job_id)]
                except ValueError:
                    continue
            raise KeyError(job_id)
        return self._dict()[job_id]

    def _dict(self) -> dict[str, PendingJob]:
        if self.by_id is None:
            self.by_id = {j.id: j for q in self.queues for j in q.jobs}
        return self.by_id

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())


class NextAtMost:
    """``next(i, gpus, also)``: the first position ``>= i`` of a queue whose job asks for at most ``gpus`` GPUs, or
    for a size in ``also``, or None, for the positions of one walk over the queue (``i`` never decreasing). The job
    at ``i`` answers in O(1); else each distinct size asked for keeps where it next occurs, found by ``list.index``
    at C speed, so a walk costs O(sizes x n) C-speed steps at worst, however often it asks."""

    __slots__ = ("queue", "gpus", "at", "last")

    def __init__(self, queue: TeamQueue) -> None:
        self.queue = queue
        self.gpus = queue.gpus
        self.at: dict[int, int] = {}  # size -> its first position >= the last i asked for (len(gpus): none)
        self.last = 0

    def __call__(self, i: int, gpus: float, also: frozenset[int] = frozenset()) -> int | None:
        g = self.gpus
        n = len(g)
        if i < n and (g[i] <= gpus or g[i] in also):
            return i
        if gpus < 1 and not also:
            return None  # (a job of no GPUs could never start anyway: see shape_ok; spares the sizes, a pass)
        if i < self.last:
            self.at.clear()
        self.last = i
        best = n
        top = max(also, default=0)
        for size in self.queue.sizes():
            if size > gpus and size not in also:
                if size > top:
                    break
                continue
            p = self.at.get(size, -1)
            if p < i:
                try:
                    p = g.index(size, i)
                except ValueError:
                    p = n
                self.at[size] = p
            if p < best:
                best = p
        return best if best < n else None
