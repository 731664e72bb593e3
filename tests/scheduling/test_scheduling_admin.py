"""The operators' admin: its pages answer, and its actions go through the services (audit rows, job events)."""

from __future__ import annotations

import pytest

from scheduling.models import Health, Job, JobState, NodeHealthChange
from scheduling.services import submit_job
from tests.factories import UserFactory


@pytest.fixture
def admin_client(client, db):
    root = UserFactory(username="root", is_superuser=True, is_staff=True)
    client.force_login(root)
    client.user = root
    return client


@pytest.fixture
def job(world, researcher, pretrain, cluster, standard):
    return submit_job(actor=researcher, team=pretrain, cluster=cluster, contract=standard, gpus=4)


@pytest.mark.parametrize("page", ["gputype", "cluster", "node", "nodehealthchange", "job", "debugsession"])
def test_every_list_page_answers(admin_client, job, page):
    assert admin_client.get(f"/admin/scheduling/{page}/").status_code == 200


def test_the_job_page_shows_its_timeline_and_keeps_the_state_read_only(admin_client, job):
    page = admin_client.get(f"/admin/scheduling/job/{job.pk}/change/")
    assert page.status_code == 200
    assert b"submitted" in page.content
    assert b'name="state"' not in page.content


def test_the_cluster_page_lists_its_nodes(admin_client, cluster):
    page = admin_client.get(f"/admin/scheduling/cluster/{cluster.pk}/change/")
    assert page.status_code == 200 and b"h3" in page.content


def test_mark_draining_goes_through_the_service_and_is_audited(admin_client, cluster):
    nodes = list(cluster.nodes.filter(name__in=["h0", "h1"]))
    response = admin_client.post("/admin/scheduling/node/", {
        "action": "mark_draining", "_selected_action": [n.pk for n in nodes]})
    assert response.status_code == 302
    assert set(cluster.nodes.filter(health=Health.DRAINING).values_list("name", flat=True)) == {"h0", "h1"}
    changes = NodeHealthChange.objects.all()
    assert len(changes) == 2 and all(c.actor == admin_client.user and c.new_health == "draining" for c in changes)


def test_the_cancel_action_cancels_through_the_service(admin_client, job):
    response = admin_client.post("/admin/scheduling/job/", {"action": "cancel_jobs", "_selected_action": [job.pk]})
    assert response.status_code == 302
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    assert job.events.last().actor == admin_client.user


def test_jobs_are_not_added_by_hand(admin_client, job):
    assert admin_client.get("/admin/scheduling/job/add/").status_code == 403
    assert Job.objects.count() == 1
