"""Submitting batch jobs: who may, what a valid request looks like, and that a refusal names its field and writes
nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from budgets.errors import PermissionDenied, ValidationError
from budgets.models import BudgetPeriod, Contract, EntryKind, LedgerEntry
from scheduling.models import Job, JobEvent, JobState
from scheduling.selectors import job_timeline
from scheduling.services import gang_fits, submit_job
from tests.factories import (
    ClusterFactory,
    ContractFactory,
    GPUTypeFactory,
    MembershipFactory,
    NodeFactory,
    TeamFactory,
    UserFactory,
)


@pytest.fixture
def submit(world, researcher, pretrain, cluster, standard):
    """Rita submits to her team on alpha under standard, unless the story says otherwise."""

    def _submit(**overrides):
        arguments = dict(actor=researcher, team=pretrain, cluster=cluster, contract=standard, gpus=4)
        arguments.update(overrides)
        return submit_job(**arguments)

    return _submit


def test_a_researcher_submits_a_job_and_its_timeline_starts_with_the_submission(submit, researcher, pretrain, h100):
    job = submit(gpus=8, gpu_type=h100, name="llama-8b", image="registry/llm:1", command=["torchrun", "train.py"],
                 environment={"EPOCHS": "3"}, constraints={"zone": "a"})

    job.refresh_from_db()
    assert (job.state, job.user, job.team, job.gpus, job.gpu_type, job.replicas) == (
        JobState.PENDING, researcher, pretrain, 8, h100, 1)
    assert (job.command, job.environment, job.constraints) == (["torchrun", "train.py"], {"EPOCHS": "3"},
                                                               {"zone": "a"})
    assert [(e.from_state, e.to_state, e.reason, e.actor) for e in job_timeline(job)] == [
        ("pending", "pending", "submitted", researcher)]


def test_a_lead_submits_for_a_team_below_theirs(submit, lead, pretrain):
    job = submit(actor=lead, rank=-5)
    assert (job.user, job.team, job.rank) == (lead, pretrain, -5)


def test_an_outsider_cannot_submit_for_a_team_they_do_not_belong_to(submit, outsider, rows):
    before = rows()
    with pytest.raises(PermissionDenied) as refused:
        submit(actor=outsider)
    assert refused.value.field == "team"
    assert rows() == before


def test_a_member_cannot_rank_their_own_job_above_the_others(submit, rows):
    before = rows()
    with pytest.raises(PermissionDenied) as refused:
        submit(rank=-1)
    assert refused.value.field == "rank"
    assert rows() == before


def test_a_team_out_of_budget_still_submits_its_work_runs_as_scavenger(submit, budgets):
    LedgerEntry.objects.create(budget=budgets["pretrain"], kind=EntryKind.ADJUSTMENT, gpu_hours=-5000,
                               reason="spent")
    assert submit().state == JobState.PENDING


def _contract_debug(world):
    return Contract.objects.get(name="debug")


def _contract_inactive(world):
    return ContractFactory(name="retired", active=False)


def _cluster_inactive(world):
    return ClusterFactory(name="old", active=False)


def _cluster_without_nodes(world):
    return ClusterFactory(name="empty")


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        pytest.param({"gpus": 0}, "gpus", id="no-gpus"),
        pytest.param({"gpus": -8}, "gpus", id="negative-gpus"),
        pytest.param({"gpus": 2.5}, "gpus", id="fractional-gpus"),
        pytest.param({"gpus": 8, "replicas": 0}, "replicas", id="no-replicas"),
        pytest.param({"gpus": 8, "replicas": 3}, "replicas", id="gpus-not-divisible-by-replicas"),
        pytest.param({"gpus": 33}, "gpus", id="more-gpus-than-the-whole-cluster"),
        pytest.param({"gpus": 12}, "gpus", id="12-gpus-are-not-whole-8-gpu-nodes"),
        pytest.param({"gpus": 40, "replicas": 5}, "gpus", id="5-replicas-but-only-4-h100-nodes"),
        pytest.param({"gpus": 18, "replicas": 2}, "gpus", id="replicas-of-9-but-nodes-hold-8"),
        pytest.param({"command": "python train.py"}, "command", id="command-as-one-string"),
        pytest.param({"command": ["python", 3]}, "command", id="command-with-a-number"),
        pytest.param({"environment": {"EPOCHS": 3}}, "environment", id="environment-value-not-a-string"),
        pytest.param({"environment": ["A=1"]}, "environment", id="environment-not-a-mapping"),
        pytest.param({"constraints": ["zone-a"]}, "constraints", id="constraints-not-an-object"),
        pytest.param({"name": "x" * 201}, "name", id="name-too-long"),
        pytest.param({"rank": "first"}, "rank", id="rank-not-a-number"),
    ],
)
def test_each_broken_rule_is_refused_with_its_field_and_writes_nothing(submit, rows, overrides, field):
    before = rows()
    with pytest.raises(ValidationError) as refused:
        submit(**overrides)
    assert refused.value.field == field
    assert rows() == before


@pytest.mark.parametrize(
    ("make", "argument", "field"),
    [
        pytest.param(_contract_debug, "contract", "contract", id="debug-contract-only-through-debug-sessions"),
        pytest.param(_contract_inactive, "contract", "contract", id="inactive-contract"),
        pytest.param(_cluster_inactive, "cluster", "cluster", id="inactive-cluster"),
        pytest.param(_cluster_without_nodes, "cluster", "cluster", id="cluster-without-nodes"),
    ],
)
def test_the_wrong_contract_or_cluster_is_refused(submit, world, rows, make, argument, field):
    before = rows()
    with pytest.raises(ValidationError) as refused:
        submit(**{argument: make(world)})
    assert refused.value.field == field
    assert rows() == before


def test_a_gpu_type_the_cluster_does_not_have_is_refused(submit, rows):
    before = rows()
    with pytest.raises(ValidationError) as refused:
        submit(gpu_type=GPUTypeFactory(name="B300"))
    assert refused.value.field == "gpu_type"
    assert rows() == before


def test_a_job_too_large_for_its_gpu_type_is_refused_even_if_another_type_could_hold_it(submit, b200, h100, rows):
    before = rows()
    with pytest.raises(ValidationError) as refused:
        submit(gpus=16, gpu_type=b200)  # two 4-GPU B200 nodes: 8 at most
    assert refused.value.field == "gpus"
    assert "B200" in refused.value.message
    assert rows() == before
    assert submit(gpus=16, gpu_type=h100).gpus == 16  # two whole H100 nodes
    assert submit(gpus=16).gpus == 16  # any type: H100 can


def test_gangs_that_fit_whole_nodes_or_spread_over_enough_nodes_are_accepted(submit):
    assert submit(gpus=32).gpus == 32  # all four 8-GPU nodes, whole
    assert submit(gpus=32, replicas=4).replicas == 4
    assert submit(gpus=8, replicas=2).replicas == 2  # B200 or H100 nodes, one replica each
    assert submit(gpus=3).gpus == 3  # one node holds it


def test_down_nodes_still_count_a_job_waits_for_them_rather_than_being_refused(submit, cluster):
    cluster.nodes.update(health="down")
    assert submit(gpus=32).state == JobState.PENDING


@pytest.mark.parametrize(
    ("sizes", "gpus", "replicas", "fits"),
    [
        ([8, 8], 8, 1, True),
        ([8, 8], 9, 1, False),
        ([8, 8], 16, 1, True),
        ([8, 8], 24, 1, False),
        ([8, 4, 4], 8, 1, True),
        ([4, 4, 8], 12, 1, False),  # whole nodes of ONE size: 12 is neither 3 x 4 (two fours) nor k x 8
        ([4, 4, 4, 8], 12, 1, True),
        ([8, 8, 8], 12, 3, True),  # 3 replicas of 4
        ([8, 8], 12, 3, False),  # one replica per node: 3 nodes needed
        ([2, 8, 8], 16, 2, True),
        ([], 1, 1, False),
        ([8], 8, 3, False),
    ],
)
def test_the_gang_rule(sizes, gpus, replicas, fits):
    assert gang_fits(node_sizes=sizes, gpus=gpus, replicas=replicas) is fits


def test_without_an_open_budget_period_nothing_can_be_submitted(submit, period, rows):
    BudgetPeriod.objects.filter(pk=period.pk).update(ends_at=timezone.now() - timedelta(days=1),
                                                     starts_at=timezone.now() - timedelta(days=31))
    before = rows()
    with pytest.raises(ValidationError) as refused:
        submit()
    assert refused.value.field == "team"
    assert "period" in refused.value.message
    assert rows() == before


def test_a_team_without_a_budget_in_the_open_period_cannot_submit(submit, nlp, rows):
    newcomers = TeamFactory(name="New", slug="new", parent=nlp)
    newbie = UserFactory(username="newbie")
    MembershipFactory(user=newbie, team=newcomers)
    before = rows()
    with pytest.raises(ValidationError) as refused:
        submit(actor=newbie, team=newcomers)
    assert refused.value.field == "team"
    assert "budget" in refused.value.message
    assert rows() == before


def test_a_refused_submission_on_a_second_cluster_leaves_the_first_queue_untouched(submit, h100):
    small = ClusterFactory(name="small")
    NodeFactory(cluster=small, name="s0", gpu_type=h100, gpus=2)
    submit(cluster=small, gpus=2)
    with pytest.raises(ValidationError):
        submit(cluster=small, gpus=4)
    assert Job.objects.filter(cluster=small).count() == 1
    assert JobEvent.objects.count() == 1
