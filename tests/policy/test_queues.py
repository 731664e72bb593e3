"""The pending queue team by team: queue order, grouping, the cross-cycle cache and the look-up by id."""

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.policy.policy_builders import flat_teams, nodes, pend, snap

from scheduling.policy import BudgetPolicy, PendingJob
from scheduling.policy.queues import (
    JobsById,
    NextAtMost,
    QueueCache,
    TeamQueue,
    group,
    in_queue_order,
    queue_sorted,
    shared_runs,
    sort_key,
)

def jobs_st(submits=(0.0, 1.0, 2.0)):
    return st.lists(
        st.builds(PendingJob, id=st.text("abc", min_size=1, max_size=3), team=st.sampled_from(["a", "b"]),
                  gpus=st.integers(1, 8), contract=st.just("standard"), submit_s=st.sampled_from(submits),
                  rank=st.sampled_from([0, 0, 1])),
        max_size=12, unique_by=lambda j: j.id)


@given(jobs_st())
def test_queue_sorted_is_the_order_by_rank_then_submit_time_then_id(jobs):
    assert queue_sorted(jobs) == sorted(jobs, key=sort_key)


@given(jobs_st((0.0, 1.0, math.nan)), st.randoms(use_true_random=False))
def test_queue_sorted_does_not_depend_on_the_input_order_even_with_a_nan_submit_time(jobs, rnd):
    assert queue_sorted(rnd.sample(jobs, len(jobs))) == queue_sorted(jobs)


@given(jobs_st((0.0, 1.0, 2.0, math.nan)))
def test_in_queue_order_only_when_sorting_would_change_nothing(jobs):
    """A cheap, conservative check: never True for a queue out of order; exact for one rank and real times."""
    ordered = jobs == sorted(jobs, key=sort_key)
    if in_queue_order(jobs):
        assert ordered and not (len(jobs) > 1 and any(math.isnan(j.submit_s) for j in jobs))
    elif len({j.rank for j in jobs}) == 1 and not any(math.isnan(j.submit_s) for j in jobs):
        assert not ordered


def test_group_keeps_each_teams_queue_order_and_counts_its_gpus():
    jobs = [pend("3", "b", 1, submit=3), pend("2", "a", 4, submit=2), pend("1", "b", 2, submit=1)]
    queues = group(jobs)
    assert list(queues) == ["a", "b"]  # teams by name, each team's jobs in queue order whatever the input order
    assert [j.id for j in queues["b"].jobs] == ["1", "3"]
    assert queues["b"].gpus == [2, 1] and queues["b"].demand == 3
    assert queues["a"].contracts() == frozenset({"standard"})


def test_queue_cache_derives_a_teams_queue_again_only_when_its_tuple_changes():
    a1 = (pend("1", "a", 2),)
    b1 = (pend("2", "b", 1), pend("3", "b", 8))
    cache = QueueCache()
    first = cache.queues({"b": b1, "a": a1, "c": ()})
    assert list(first) == ["a", "b"]  # by team name; an empty queue is no queue
    a2 = a1 + (pend("4", "a", 3),)
    second = cache.queues({"a": a2, "b": b1})
    assert second["b"] is first["b"]  # the same tuple: nothing derived again
    assert second["a"] is not first["a"] and second["a"].gpus == [2, 3] and second["a"].demand == 5
    third = cache.queues({"a": a2})
    assert third["a"] is second["a"] and list(third) == ["a"]
    assert cache.queues({"b": b1})["b"] is not first["b"]  # only the last cycle's tuples are kept


def test_jobs_by_id_finds_a_job_in_any_queue_and_raises_key_error_for_an_unknown_one():
    queues = group([pend(str(i), "ab"[i % 2]) for i in range(20)])
    by_id = JobsById(queues.values())
    for i in range(20):  # past the scans, the dict answers the same
        assert by_id[str(i)].id == str(i)
    assert by_id.get("nope") is None
    with pytest.raises(KeyError):
        by_id["nope"]
    assert len(by_id) == 20 and set(by_id) == {str(i) for i in range(20)}


@given(st.lists(st.integers(1, 64), max_size=12),
       st.lists(st.tuples(st.integers(0, 12), st.integers(0, 80)), max_size=8))
def test_next_at_most_finds_the_first_job_that_small(sizes, asks):
    """A team's walk goes straight to its next job that fits the free GPUs, however the free count moves."""
    q = TeamQueue([pend(f"j{i}", "lab/a", g) for i, g in enumerate(sizes)])
    at_most = NextAtMost(q)
    for start, gpus in sorted(asks, key=lambda a: a[0]) + asks:  # a walk's positions rise; then any order
        expected = next((i for i in range(start, len(sizes)) if sizes[i] <= gpus), None)
        assert at_most(start, gpus) == expected
    assert q.sizes() == sorted(set(sizes))


def test_pending_by_team_must_hold_the_same_jobs_as_pending():
    s = snap(nodes(1), flat_teams({"a": 10}), pending=(pend("1", "a"), pend("2", "a")))
    bad = dataclasses.replace(s, pending_by_team={"a": (s.pending[0],)})
    with pytest.raises(ValueError, match="pending_by_team"):
        BudgetPolicy().plan(bad)


def test_a_queue_splits_by_contract_in_queue_order_and_keeps_the_split():
    q = group([pend("1", "a", contract="debug"), pend("2", "a", 2), pend("3", "a", contract="debug")])["a"]
    debug, batch = q.split(frozenset({"debug"}))
    assert [j.id for j in debug.jobs] == ["1", "3"] and [j.id for j in batch.jobs] == ["2"]
    assert batch.gpus == [2] and debug.demand == 2
    assert q.split(frozenset({"debug"}))[0] is debug
    assert [j.id for j in q.split(frozenset({"standard"}))[0].jobs] == ["2"]


@given(st.lists(st.sampled_from([None, "H100", "B200", "B300"]), max_size=12), st.integers(0, 12),
       st.sets(st.sampled_from(["H100", "B200", "B300"])))
def test_next_not_of_finds_the_first_job_of_another_gpu_type(types, start, blocked):
    """A team's walk skips the jobs of GPU types its claims failed on this cycle; a job of any type is never
    skipped."""
    q = TeamQueue([pend(f"j{i}", "lab/a", gpu_type=t) for i, t in enumerate(types)])
    expected = next((i for i in range(start, len(types)) if types[i] not in blocked), None)
    assert q.next_not_of(start, blocked) == expected


def _derived(q: TeamQueue) -> tuple:
    debug, batch = q.split(frozenset({"debug"}))
    return (list(q.jobs), q.gpus, q.demand, q.sizes(), q.contracts(), q.shapes(), q.ids(),
            list(debug.jobs), debug.gpus, debug.demand, debug.sizes(), list(batch.jobs), batch.gpus, batch.demand,
            batch.ids())


@st.composite
def _queue_edits(draw):
    """A team's queue in two cycles: the second loses some jobs (they started), gains some (submitted after all
    others, or requeued in their place) and keeps the rest, the same objects in the same order."""
    n = draw(st.integers(0, 300))
    sizes = draw(st.lists(st.sampled_from([1, 1, 1, 2, 4, 8, 16]), min_size=n, max_size=n))
    kinds = draw(st.lists(st.sampled_from(["standard", "standard", "long", "debug"]), min_size=n, max_size=n))
    old = [pend(f"j{i:04d}", "lab/a", g, submit=float(i), contract=c) for i, (g, c) in enumerate(zip(sizes, kinds))]
    gone = draw(st.sets(st.integers(0, max(0, n - 1)), max_size=min(n, 90)))
    new = [j for i, j in enumerate(old) if i not in gone]
    for i in draw(st.lists(st.integers(0, max(0, n - 1)), max_size=6)) if n else []:  # requeued, in its place
        if i in gone:
            new.append(dataclasses.replace(old[i], runs=1))
    new.extend(pend(f"k{i:04d}", "lab/a", 8 if i % 3 else 1, submit=1e6 + i)
               for i in range(draw(st.integers(0, 40))))
    return old, sorted(new, key=sort_key), draw(st.booleans())


@given(_queue_edits())
def test_a_queue_derived_from_the_last_cycles_is_the_queue_built_anew(edits):
    """TeamQueue.following (the cache's way from one cycle to the next) gives what building the queue from its jobs
    gives, whatever left and arrived, whether the last queue had derived its sizes, ids and split or not, and
    whether it derives from the changes or, past too many, anew; and so does the queue that follows it."""
    old, new, derive_first = edits
    prev = TeamQueue(tuple(old))
    if derive_first:
        _derived(prev)
    q = TeamQueue.following(prev, tuple(new))
    assert _derived(q) == _derived(TeamQueue(tuple(new)))
    later = tuple([j for i, j in enumerate(new) if i % 7]
                  + [pend(f"m{i}", "lab/a", 16, submit=2e6 + i) for i in range(3)])
    assert _derived(TeamQueue.following(q, later)) == _derived(TeamQueue(later))  # and a cycle later


@given(_queue_edits())
def test_shared_runs_are_runs_of_the_same_jobs_in_order(edits):
    old, new, _ = edits
    runs = shared_runs(tuple(old), tuple(new), len(old) + len(new))
    assert runs is not None
    i = j = 0
    for a, b, k in runs:
        assert a >= i and b >= j and k > 0 and old[a:a + k] == new[b:b + k]
        i, j = a + k, b + k
    shared = sum(k for _, _, k in runs)
    assert shared == len(set(map(id, old)) & set(map(id, new)))  # every job kept is in a run: nothing lost


def test_a_size_contract_or_shape_whose_last_job_left_is_gone_from_the_derived_queue():
    old = tuple(pend(f"j{i}", "lab/a", g, submit=float(i), contract=c)
                for i, (g, c) in enumerate([(1, "standard"), (16, "long"), (1, "debug"), (2, "standard")]))
    prev = TeamQueue(old)
    _derived(prev)
    q = TeamQueue.following(prev, (old[0], old[3]))  # the 16-GPU long job and the session started
    assert q.sizes() == [1, 2] and q.contracts() == frozenset({"standard"})
    assert q.shapes() == frozenset({(1, None, None), (2, None, None)})
    assert q.split(frozenset({"debug"}))[0].jobs == [] and q.demand == 3


def test_a_split_is_carried_only_while_jobs_under_its_contracts_wait():
    """A team's queue is split when its debug session waits; once the session started, the cycles that follow do
    not split the team's batch queue again (days of it, every cycle), until a session waits again."""
    batch = tuple(pend(f"j{i}", "lab/a", submit=float(i)) for i in range(5))
    session = pend("s", "lab/a", contract="debug", submit=9.0)
    prev = TeamQueue(batch + (session,))
    _derived(prev)
    after = TeamQueue.following(prev, batch[1:])  # the session and the first batch job started
    assert after._split is None
    assert TeamQueue.following(after, batch[2:])._split is None
    again = TeamQueue.following(after, batch[1:] + (pend("s2", "lab/a", contract="debug", submit=10.0),))
    assert [j.id for j in again.split(frozenset({"debug"}))[0].jobs] == ["s2"]
    while_waiting = TeamQueue.following(prev, batch[1:] + (session,))  # the session still waits
    assert while_waiting._split is not None and while_waiting._split[1].jobs == [session]


@given(st.data())
def test_the_cache_keeps_every_pending_job_by_id_cycle_after_cycle(data):
    """QueueCache.by_id (what a cycle's look-ups by id read) holds exactly the jobs of the queues it handed out, as
    the teams' queues lose and gain jobs, stay the same tuple, empty and come back."""
    cache = QueueCache()
    queues: dict[str, tuple] = {}
    fresh = iter(range(10**6))
    for _ in range(data.draw(st.integers(1, 6))):
        for team in "abc":
            kind = data.draw(st.sampled_from(["same", "same", "edit", "edit", "edit", "empty"]))
            jobs = list(queues.get(team, ()))
            if kind == "empty":
                jobs = []
            elif kind == "edit":
                gone = data.draw(st.sets(st.integers(0, max(0, len(jobs) - 1)), max_size=len(jobs)))
                kept = [j for i, j in enumerate(jobs) if i not in gone]
                requeued = [dataclasses.replace(jobs[i], runs=1) for i in sorted(gone)[:2]]
                new = [pend(f"{team}{next(fresh)}", team, submit=1e6 + len(jobs) + i)
                       for i in range(data.draw(st.integers(0, 80)))]
                jobs = sorted(kept + requeued + new, key=sort_key)
            if kind != "same" or team not in queues:
                queues[team] = tuple(jobs)
        out = cache.queues({t: q for t, q in queues.items() if q})
        assert cache.by_id == {j.id: j for q in out.values() for j in q.jobs}  # (jobs compare field by field)
