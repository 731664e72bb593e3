"""Absurd input gets a clear refusal naming the field, never a crash: ranks beyond the column, JSON that no
database stores (NaN, infinities, NUL), a start that is not a time; and in the admin, cluster settings that are
not a JSON object, and a job's rank or submission changed around ``set_job_rank`` and ``submit_job``."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from budgets.errors import ValidationError
from scheduling import services
from scheduling.models import Cluster, Job, JobState
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(world, researcher, pretrain, cluster, standard):
    return services.submit_job(actor=researcher, team=pretrain, cluster=cluster, contract=standard, gpus=4)


@pytest.mark.parametrize("rank", [2**70, -(2**70), 2**31, -(2**31) - 1, 1.5, "3"], ids=repr)
def test_ranks_beyond_the_column_are_refused(world, lead, pretrain, cluster, standard, job, rows, rank):
    before = rows()
    with pytest.raises(ValidationError) as error:
        services.submit_job(actor=lead, team=pretrain, cluster=cluster, contract=standard, gpus=4, rank=rank)
    assert error.value.field == "rank"
    with pytest.raises(ValidationError) as error:
        services.set_job_rank(actor=lead, job=job, rank=rank)
    assert error.value.field == "rank"
    assert rows() == before
    assert Job.objects.get(pk=job.pk).rank == 0


def test_the_extreme_ranks_the_column_holds_are_accepted(world, lead, job):
    for rank in (2**31 - 1, -(2**31)):
        assert services.set_job_rank(actor=lead, job=job, rank=rank).rank == rank


@pytest.mark.parametrize("payload, field", [
    ({"constraints": {"min_memory": float("nan")}}, "constraints"),
    ({"constraints": {"nodes": [1, float("inf")]}}, "constraints"),
    ({"constraints": {"zone\x00": "a"}}, "constraints"),
    ({"environment": {"TOKEN": "a\x00b"}}, "environment"),
    ({"command": ["python", "train.py\x00"]}, "command"),
    ({"name": "run\x00"}, "name"),
    ({"image": "img\x00"}, "image"),
])
def test_payloads_no_database_can_store_are_refused(world, researcher, pretrain, cluster, standard, rows, payload,
                                                    field):
    before = rows()
    with pytest.raises(ValidationError) as error:
        services.submit_job(actor=researcher, team=pretrain, cluster=cluster, contract=standard, gpus=4, **payload)
    assert error.value.field == field
    assert rows() == before


@pytest.mark.parametrize("starts_at", ["tomorrow", 1700000000, object()], ids=repr)
def test_a_debug_session_start_that_is_not_a_time_is_refused(world, researcher, pretrain, cluster, rows,
                                                            starts_at):
    before = rows()
    with pytest.raises(ValidationError) as error:
        services.reserve_debug_session(actor=researcher, team=pretrain, cluster=cluster, gpus=1, minutes=30,
                                       starts_at=starts_at)
    assert error.value.field == "starts_at"
    assert rows() == before


# --- admin --------------------------------------------------------------------------------------------------------

@pytest.fixture
def admin_client(client, db):
    client.force_login(UserFactory(username="root", is_superuser=True, is_staff=True))
    return client


def _cluster_form(name, settings):
    return {"name": name, "adapter": "simulated", "adapter_settings": settings, "active": "on",
            "nodes-TOTAL_FORMS": 0, "nodes-INITIAL_FORMS": 0}


@pytest.mark.parametrize("settings", ["NaN", '{"speedup": NaN}', '{"speedup": Infinity}', "1e400",
                                      '{"speedup": 1e400}', "[1, 2]", '"slurm"', "42", '{"partition": "a\\u0000"}'])
def test_cluster_settings_must_be_a_storable_json_object(admin_client, settings):
    answer = admin_client.post("/admin/scheduling/cluster/add/", _cluster_form("beta", settings))
    assert answer.status_code == 200
    assert b"errornote" in answer.content
    assert not Cluster.objects.exists()


@pytest.mark.parametrize("settings", ["", "null", "{}"])
def test_empty_cluster_settings_are_an_empty_object(admin_client, settings):
    answer = admin_client.post("/admin/scheduling/cluster/add/", _cluster_form("beta", settings))
    assert answer.status_code == 302
    assert Cluster.objects.get(name="beta").adapter_settings == {}


def test_changing_a_clusters_settings_to_nan_is_refused(admin_client, cluster):
    answer = admin_client.post(f"/admin/scheduling/cluster/{cluster.pk}/change/",
                               _cluster_form(cluster.name, '{"speedup": NaN}'))
    assert answer.status_code == 200
    assert Cluster.objects.get(pk=cluster.pk).adapter_settings == {}


def _job_form(job, **changes):
    return {"name": job.name, "rank": job.rank, "events-TOTAL_FORMS": 0, "events-INITIAL_FORMS": 0, **changes}


def test_the_admin_orders_jobs_through_set_job_rank(world, admin_client, job):
    answer = admin_client.post(f"/admin/scheduling/job/{job.pk}/change/", _job_form(job, rank=5, name="renamed"))
    assert answer.status_code == 302
    job.refresh_from_db()
    assert (job.rank, job.name, job.state) == (5, "renamed", JobState.PENDING)

    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING)
    answer = admin_client.post(f"/admin/scheduling/job/{job.pk}/change/", _job_form(job, rank=1))
    assert answer.status_code == 200 and b"only pending jobs can be reordered" in answer.content
    assert Job.objects.get(pk=job.pk).rank == 5


def test_staff_cannot_reorder_another_teams_queue_through_the_admin(world, client, job, outsider):
    """oscar is staff with the job permissions but leads no team: the lead's rule holds in the admin too."""
    outsider.is_staff = True
    outsider.save()
    outsider.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="scheduling", codename__in=["view_job", "change_job"]))
    client.force_login(outsider)
    answer = client.post(f"/admin/scheduling/job/{job.pk}/change/", _job_form(job, rank=-100))
    assert answer.status_code == 200 and b"only a lead of team" in answer.content
    assert Job.objects.get(pk=job.pk).rank == 0


def test_a_jobs_submission_is_read_only_in_the_admin(world, admin_client, job, vision):
    """gpus, replicas and team were checked by submit_job; the admin cannot change them behind its back."""
    answer = admin_client.post(f"/admin/scheduling/job/{job.pk}/change/",
                               _job_form(job, gpus=3, replicas=2, team=vision.pk, command='{"a": NaN}'))
    assert answer.status_code == 302
    job.refresh_from_db()
    assert (job.gpus, job.replicas, job.team_id, job.command) == (4, 1, job.team_id, [])
    assert job.team.slug == "pretrain"
