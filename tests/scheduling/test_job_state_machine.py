"""The job state machine: every legal move works and is recorded once; every other move is refused and leaves no
trace; a move made from a stale view of the job loses to the one that got there first (compare-and-swap)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

from budgets.errors import ConflictError, ValidationError
from scheduling.models import TRANSITIONS, Job, JobEvent, JobState
from scheduling.services import transition
from tests.factories import JobFactory, UserFactory

LEGAL = [(a, b) for a in JobState.values for b in JobState.values if b in TRANSITIONS[a]]
ILLEGAL = [(a, b) for a in JobState.values for b in JobState.values if b not in TRANSITIONS[a]]


def test_the_table_covers_every_state_and_only_final_states_are_dead_ends():
    assert set(TRANSITIONS) == set(JobState.values)
    assert {s for s, moves in TRANSITIONS.items() if not moves} == {"completed", "failed", "cancelled"}
    assert len(LEGAL) + len(ILLEGAL) == len(JobState.values) ** 2


@pytest.mark.django_db
@pytest.mark.parametrize(("from_state", "to_state"), LEGAL, ids=[f"{a}->{b}" for a, b in LEGAL])
def test_every_legal_transition_moves_the_job_and_writes_exactly_one_event(from_state, to_state):
    job = JobFactory(state=from_state)
    actor = UserFactory()

    moved = transition(job=job, to_state=to_state, reason="because", actor=actor)

    assert moved.state == to_state
    assert Job.objects.get(pk=job.pk).state == to_state
    events = list(JobEvent.objects.filter(job=job))
    assert [(e.from_state, e.to_state, e.reason, e.actor) for e in events] == [(from_state, to_state, "because",
                                                                                  actor)]


@pytest.mark.django_db
@pytest.mark.parametrize(("from_state", "to_state"), ILLEGAL, ids=[f"{a}->{b}" for a, b in ILLEGAL])
def test_every_illegal_transition_is_refused_and_writes_nothing(from_state, to_state):
    job = JobFactory(state=from_state)

    with pytest.raises(ValidationError) as refused:
        transition(job=job, to_state=to_state, reason="should not happen")

    assert refused.value.field == "state"
    assert from_state in str(refused.value) and to_state in str(refused.value)
    assert Job.objects.get(pk=job.pk).state == from_state
    assert not JobEvent.objects.exists()


@pytest.mark.django_db
def test_an_unknown_state_is_refused():
    job = JobFactory(state=JobState.PENDING)
    with pytest.raises(ValidationError):
        transition(job=job, to_state="exploded")
    assert Job.objects.get(pk=job.pk).state == JobState.PENDING
    assert not JobEvent.objects.exists()


@pytest.mark.django_db
def test_a_stale_job_loses_to_whoever_moved_it_first():
    job = JobFactory(state=JobState.PENDING)
    stale = Job.objects.get(pk=job.pk)
    transition(job=job, to_state=JobState.STARTING, reason="the loop started it")

    with pytest.raises(ConflictError) as conflict:
        transition(job=stale, to_state=JobState.CANCELLED, reason="the user cancelled it")

    assert conflict.value.field == "state"
    assert f"job {job.pk} is no longer pending" in str(conflict.value)
    assert Job.objects.get(pk=job.pk).state == JobState.STARTING
    assert list(JobEvent.objects.values_list("to_state", flat=True)) == [JobState.STARTING]


@pytest.mark.django_db
def test_a_full_life_sets_the_timestamps_and_clears_the_last_placement_on_requeue():
    job = JobFactory(state=JobState.PENDING)

    job = transition(job=job, to_state=JobState.STARTING, placement=[["h0", 8]], backend_id="sim-1")
    assert (job.runs, job.started_at, job.first_started_at) == (1, None, None)

    job = transition(job=job, to_state=JobState.RUNNING)
    first_start = job.first_started_at
    assert job.started_at is not None and first_start == job.started_at

    job = transition(job=job, to_state=JobState.PREEMPTING, reason="fair-share")
    job = transition(job=job, to_state=JobState.REQUEUED, reason="checkpointed")
    assert (job.runs, job.placement, job.backend_id) == (1, [["h0", 8]], "sim-1")

    job = transition(job=job, to_state=JobState.PENDING, reason="back in the queue")
    assert (job.placement, job.backend_id, job.started_at) == ([], "", None)

    job = transition(job=job, to_state=JobState.STARTING, placement=[["h1", 8]], backend_id="sim-2")
    job = transition(job=job, to_state=JobState.RUNNING)
    assert job.runs == 2
    assert job.first_started_at == first_start
    assert job.started_at >= first_start
    assert job.ended_at is None

    job = transition(job=job, to_state=JobState.COMPLETED, exit_code=0)
    assert job.ended_at is not None and job.exit_code == 0
    assert [(e.from_state, e.to_state) for e in job.events.all()] == [
        ("pending", "starting"), ("starting", "running"), ("running", "preempting"), ("preempting", "requeued"),
        ("requeued", "pending"), ("pending", "starting"), ("starting", "running"), ("running", "completed"),
    ]


@pytest.mark.django_db
def test_transition_cannot_smuggle_in_identity_fields():
    job = JobFactory(state=JobState.PENDING)
    other = UserFactory()
    with pytest.raises(TypeError):
        transition(job=job, to_state=JobState.STARTING, user=other)
    assert Job.objects.get(pk=job.pk).state == JobState.PENDING
    assert not JobEvent.objects.exists()


# ---- real concurrency, PostgreSQL only ------------------------------------------------------------------------


def _race(job_pk: int, rounds_hold_s: float) -> list[str]:
    """Two threads, two connections, both holding the same stale ``pending`` job, start it at the same moment."""
    barrier = threading.Barrier(2)
    outcomes: list[str] = []
    lock = threading.Lock()

    def contender():
        try:
            job = Job.objects.get(pk=job_pk)  # both read "pending" before either moves it
            barrier.wait(timeout=10)
            try:
                with transaction.atomic():
                    transition(job=job, to_state=JobState.STARTING, reason=threading.current_thread().name)
                    time.sleep(rounds_hold_s)  # keep the winner's row lock while the loser's UPDATE waits on it
                result = "won"
            except ConflictError:
                result = "conflict"
            except Exception as error:  # noqa: BLE001 - any other outcome fails the test below
                result = f"error: {error!r}"
            with lock:
                outcomes.append(result)
        finally:
            connection.close()

    threads = [threading.Thread(target=contender, name=f"contender-{i}") for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return sorted(outcomes)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_connections_starting_the_same_job_at_once_exactly_one_wins():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: SQLite serialises writers, so there is no real race to lose")
    for round_number in range(8):
        job = JobFactory(state=JobState.PENDING)
        hold = 0.2 if round_number % 2 == 0 else 0.0  # held-open winner, and a bare race

        outcomes = _race(job.pk, hold)

        assert outcomes == ["conflict", "won"], f"round {round_number}: {outcomes}"
        assert Job.objects.get(pk=job.pk).state == JobState.STARTING
        assert Job.objects.get(pk=job.pk).runs == 1
        assert JobEvent.objects.filter(job_id=job.pk).count() == 1
