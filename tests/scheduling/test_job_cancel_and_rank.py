"""Cancelling jobs (the submitter, a lead above, or an operator) and ordering a team's queue (its lead only)."""

from __future__ import annotations

import pytest

from budgets.errors import ConflictError, PermissionDenied, ValidationError
from budgets.models import Role
from scheduling.models import Job, JobEvent, JobState
from scheduling.services import cancel_job, reserve_debug_session, set_job_rank, submit_job, transition
from tests.factories import MembershipFactory, UserFactory


@pytest.fixture
def ritas_job(world, researcher, pretrain, cluster, standard):
    return submit_job(actor=researcher, team=pretrain, cluster=cluster, contract=standard, gpus=8)


def _events(job):
    return [(e.from_state, e.to_state) for e in job.events.all()]


def test_rita_cancels_her_pending_job(ritas_job, researcher):
    job = cancel_job(actor=researcher, job=ritas_job, reason="wrong learning rate")

    assert job.state == JobState.CANCELLED and job.ended_at is not None
    last = job.events.last()
    assert (last.from_state, last.to_state, last.reason, last.actor) == ("pending", "cancelled",
                                                                          "wrong learning rate", researcher)


def test_the_lead_above_cancels_a_running_job_the_loop_stops_it_later(ritas_job, lead):
    transition(job=ritas_job, to_state=JobState.STARTING, backend_id="sim-7")
    running = transition(job=ritas_job, to_state=JobState.RUNNING)

    job = cancel_job(actor=lead, job=running)

    assert job.state == JobState.CANCELLED
    assert job.backend_id == "sim-7"  # kept: the loop uses it to stop the job on the backend
    assert _events(job)[-1] == ("running", "cancelled")
    assert job.events.last().actor == lead


@pytest.mark.parametrize("state", [JobState.REQUEUED, JobState.STARTING, JobState.PREEMPTING])
def test_every_live_state_can_be_cancelled(ritas_job, researcher, state):
    Job.objects.filter(pk=ritas_job.pk).update(state=state)
    job = cancel_job(actor=researcher, job=Job.objects.get(pk=ritas_job.pk))
    assert job.state == JobState.CANCELLED
    assert _events(job)[-1] == (state, "cancelled")


def test_an_operator_superuser_cancels_anything(ritas_job):
    root = UserFactory(username="root", is_superuser=True, is_staff=True)
    assert cancel_job(actor=root, job=ritas_job).state == JobState.CANCELLED


def test_cancelling_reads_the_current_state_even_from_a_stale_object(ritas_job, researcher):
    stale = Job.objects.get(pk=ritas_job.pk)
    transition(job=ritas_job, to_state=JobState.STARTING)
    job = cancel_job(actor=researcher, job=stale)
    assert _events(job)[-1] == ("starting", "cancelled")


@pytest.mark.parametrize("actor_name", ["outsider", "teammate", "staff_without_superuser"])
def test_others_cannot_cancel_rita_s_job(ritas_job, request, actor_name, pretrain):
    if actor_name == "outsider":
        actor = request.getfixturevalue("outsider")
    elif actor_name == "teammate":
        actor = UserFactory(username="tom")
        MembershipFactory(user=actor, team=pretrain, role=Role.MEMBER)  # a member, not a lead
    else:
        actor = request.getfixturevalue("operator")
    events_before = JobEvent.objects.count()

    with pytest.raises(PermissionDenied):
        cancel_job(actor=actor, job=ritas_job)

    assert Job.objects.get(pk=ritas_job.pk).state == JobState.PENDING
    assert JobEvent.objects.count() == events_before


@pytest.mark.parametrize("final", [JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED])
def test_a_finished_job_cannot_be_cancelled(ritas_job, researcher, final):
    Job.objects.filter(pk=ritas_job.pk).update(state=final)
    events_before = JobEvent.objects.count()

    with pytest.raises(ValidationError) as refused:
        cancel_job(actor=researcher, job=Job.objects.get(pk=ritas_job.pk))

    assert refused.value.field == "state"
    assert f"already {final}" in refused.value.message
    assert JobEvent.objects.count() == events_before


def test_cancelling_a_debug_session_releases_its_reservation(world, researcher, pretrain, cluster):
    session = reserve_debug_session(actor=researcher, team=pretrain, cluster=cluster, gpus=1, minutes=30)
    cancel_job(actor=researcher, job=session.job)
    session.refresh_from_db()
    assert session.released_at is not None and session.release_reason == "cancelled"


# ---- rank -----------------------------------------------------------------------------------------------------


def test_the_lead_reorders_a_pending_job_of_a_team_below(ritas_job, lead):
    assert set_job_rank(actor=lead, job=ritas_job, rank=-10).rank == -10
    assert Job.objects.get(pk=ritas_job.pk).rank == -10


@pytest.mark.parametrize("who", ["researcher", "outsider"])
def test_only_a_lead_reorders(ritas_job, request, who):
    with pytest.raises(PermissionDenied) as refused:
        set_job_rank(actor=request.getfixturevalue(who), job=ritas_job, rank=-10)
    assert refused.value.field == "rank"
    assert Job.objects.get(pk=ritas_job.pk).rank == 0


def test_a_lead_of_a_sibling_team_cannot_reorder(ritas_job, vision):
    vision_lead = UserFactory(username="victor")
    MembershipFactory(user=vision_lead, team=vision, role=Role.LEAD)
    with pytest.raises(PermissionDenied):
        set_job_rank(actor=vision_lead, job=ritas_job, rank=-1)


def test_only_pending_jobs_are_reordered(ritas_job, lead):
    started = transition(job=ritas_job, to_state=JobState.STARTING)
    with pytest.raises(ValidationError) as refused:
        set_job_rank(actor=lead, job=started, rank=3)
    assert refused.value.field == "state"
    assert Job.objects.get(pk=ritas_job.pk).rank == 0


def test_reordering_a_job_that_just_started_elsewhere_is_a_conflict(ritas_job, lead):
    stale = Job.objects.get(pk=ritas_job.pk)
    transition(job=ritas_job, to_state=JobState.STARTING)
    with pytest.raises(ConflictError):
        set_job_rank(actor=lead, job=stale, rank=3)
    assert Job.objects.get(pk=ritas_job.pk).rank == 0
