"""Who sees which jobs, the queue and the running list of a cluster, and a job's timeline."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import AnonymousUser
from django.utils import timezone

from scheduling.models import JobState
from scheduling.selectors import job_timeline, jobs_visible_to, queue_for, running_on
from scheduling.services import cancel_job, submit_job, transition
from tests.factories import ClusterFactory, JobFactory, UserFactory


@pytest.fixture
def jobs(world, lead, researcher, outsider, nlp, pretrain, vision, cluster, standard):
    def submit(actor, team, name):
        return submit_job(actor=actor, team=team, cluster=cluster, contract=standard, gpus=1, name=name)

    return {
        "rita": submit(researcher, pretrain, "rita"),
        "lena": submit(lead, nlp, "lena"),
        "oscar": submit(outsider, vision, "oscar"),
    }


def _names(queryset):
    return sorted(job.name for job in queryset)


def test_the_lead_sees_her_team_and_the_subtree_below(jobs, lead):
    assert _names(jobs_visible_to(lead)) == ["lena", "rita"]


def test_the_researcher_sees_her_team_only(jobs, researcher):
    assert _names(jobs_visible_to(researcher)) == ["rita"]


def test_the_outsider_sees_his_own_team_only(jobs, outsider):
    assert _names(jobs_visible_to(outsider)) == ["oscar"]


def test_a_submitter_who_left_the_team_still_sees_their_own_job(jobs, researcher):
    researcher.memberships.all().delete()
    assert _names(jobs_visible_to(researcher)) == ["rita"]


def test_operators_see_everything_and_strangers_nothing(jobs):
    root = UserFactory(username="root", is_superuser=True)
    assert _names(jobs_visible_to(root)) == ["lena", "oscar", "rita"]
    assert _names(jobs_visible_to(UserFactory(username="stranger"))) == []
    assert _names(jobs_visible_to(AnonymousUser())) == []
    inactive = UserFactory(username="gone", is_active=False, is_superuser=True)
    assert _names(jobs_visible_to(inactive)) == []


def test_the_queue_holds_pending_jobs_in_arrival_order(world, cluster, researcher, pretrain, standard):
    start = timezone.now()
    submitted = []
    for minute, name in enumerate(["first", "second", "third"]):
        with time_machine.travel(start + timedelta(minutes=minute), tick=False):
            submitted.append(submit_job(actor=researcher, team=pretrain, cluster=cluster, contract=standard,
                                        gpus=1, name=name))
    JobFactory(cluster=ClusterFactory(name="elsewhere"), name="other cluster")
    transition(job=submitted[1], to_state=JobState.STARTING)

    assert [job.name for job in queue_for(cluster)] == ["first", "third"]
    assert [job.name for job in running_on(cluster)] == ["second"]


def test_running_on_lists_jobs_holding_gpus_and_not_finished_ones(jobs, cluster, researcher):
    for name in ("rita", "lena"):
        transition(job=jobs[name], to_state=JobState.STARTING)
    transition(job=jobs["lena"], to_state=JobState.RUNNING)
    transition(job=jobs["lena"], to_state=JobState.PREEMPTING)
    cancel_job(actor=researcher, job=jobs["rita"])
    assert [job.name for job in running_on(cluster)] == ["lena"]


def test_the_timeline_reads_as_the_job_s_story(jobs, researcher):
    job = jobs["rita"]
    transition(job=job, to_state=JobState.STARTING, reason="placed on h0")
    cancel_job(actor=researcher, job=job, reason="oops")
    assert [(e.from_state, e.to_state, e.reason) for e in job_timeline(job)] == [
        ("pending", "pending", "submitted"), ("pending", "starting", "placed on h0"),
        ("starting", "cancelled", "oops")]
