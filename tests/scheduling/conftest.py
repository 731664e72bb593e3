"""The world of the scheduling stories.

An organisation ``lab`` with ``lab/nlp`` (led by Lena the lead) and its child ``lab/nlp/pretrain`` (where Rita the
researcher is a member), and ``lab/vision`` (where Oscar the outsider works: he has no business with nlp).
Olga is an operator (staff). One open budget period with a budget for every team, a ``standard`` batch contract,
a ``debug`` contract, and cluster ``alpha`` with four 8-GPU H100 nodes and two 4-GPU B200 nodes.
"""

from __future__ import annotations

import pytest

from budgets.models import Queue, Role
from scheduling.models import Job, JobEvent
from tests.factories import (
    BudgetFactory,
    BudgetPeriodFactory,
    ClusterFactory,
    ContractFactory,
    GPUTypeFactory,
    MembershipFactory,
    NodeFactory,
    TeamFactory,
    UserFactory,
)


@pytest.fixture
def lab(db):
    return TeamFactory(name="Lab", slug="lab")


@pytest.fixture
def nlp(lab):
    return TeamFactory(name="NLP", slug="nlp", parent=lab)


@pytest.fixture
def pretrain(nlp):
    return TeamFactory(name="Pretraining", slug="pretrain", parent=nlp)


@pytest.fixture
def vision(lab):
    return TeamFactory(name="Vision", slug="vision", parent=lab)


@pytest.fixture
def lead(nlp):
    user = UserFactory(username="lena")
    MembershipFactory(user=user, team=nlp, role=Role.LEAD)
    return user


@pytest.fixture
def researcher(pretrain):
    user = UserFactory(username="rita")
    MembershipFactory(user=user, team=pretrain, role=Role.MEMBER)
    return user


@pytest.fixture
def outsider(vision):
    user = UserFactory(username="oscar")
    MembershipFactory(user=user, team=vision, role=Role.MEMBER)
    return user


@pytest.fixture
def operator(db):
    return UserFactory(username="olga", is_staff=True)


@pytest.fixture
def period(db):
    return BudgetPeriodFactory(name="this-month")


@pytest.fixture
def budgets(period, lab, nlp, pretrain, vision):
    return {team.slug: BudgetFactory(team=team, period=period) for team in (lab, nlp, pretrain, vision)}


@pytest.fixture
def standard(db):
    return ContractFactory(name="standard", queue=Queue.BATCH)


@pytest.fixture
def debug_contract(db):
    return ContractFactory(name="debug", queue=Queue.DEBUG, protected_minutes=240, grace_seconds=0)


@pytest.fixture
def h100(db):
    return GPUTypeFactory(name="H100")


@pytest.fixture
def b200(db):
    return GPUTypeFactory(name="B200")


@pytest.fixture
def cluster(h100, b200):
    cluster = ClusterFactory(name="alpha")
    for i in range(4):
        NodeFactory(cluster=cluster, name=f"h{i}", gpu_type=h100, gpus=8)
    for i in range(2):
        NodeFactory(cluster=cluster, name=f"b{i}", gpu_type=b200, gpus=4)
    return cluster


@pytest.fixture
def world(lead, researcher, outsider, operator, budgets, standard, debug_contract, cluster):
    """Everything above, for stories that need the whole world."""


@pytest.fixture
def rows():
    """How many jobs and job events exist: a refusal must leave both unchanged."""
    return lambda: (Job.objects.count(), JobEvent.objects.count())
