"""The budgets stories' world: an organisation ``lab`` with ``lab/nlp`` (children ``pretrain`` and ``eval``) and
``lab/cv``, an open period, and the actors: an operator (superuser), a lead of lab/nlp, a researcher in
lab/nlp/pretrain and an outsider in lab/cv."""

from dataclasses import dataclass
from decimal import Decimal

import pytest

from budgets.models import Budget, BudgetChange, BudgetPeriod, LedgerEntry, Membership, Role, Team
from tests.factories import BudgetFactory, BudgetPeriodFactory, MembershipFactory, TeamFactory, UserFactory


@dataclass
class World:
    operator: object
    lead: object
    researcher: object
    outsider: object
    lab: object
    nlp: object
    pretrain: object
    eval: object
    cv: object
    period: object


@pytest.fixture
def world(db):
    operator = UserFactory(username="olivia", is_superuser=True, is_staff=True)
    lead = UserFactory(username="alice")
    researcher = UserFactory(username="bob")
    outsider = UserFactory(username="charlie")
    lab = TeamFactory(name="Lab", slug="lab")
    nlp = TeamFactory(name="NLP", slug="nlp", parent=lab)
    pretrain = TeamFactory(name="Pretraining", slug="pretrain", parent=nlp)
    eval_ = TeamFactory(name="Evaluation", slug="eval", parent=nlp)
    cv = TeamFactory(name="Vision", slug="cv", parent=lab)
    MembershipFactory(user=lead, team=nlp, role=Role.LEAD)
    MembershipFactory(user=researcher, team=pretrain, role=Role.MEMBER)
    MembershipFactory(user=outsider, team=cv, role=Role.MEMBER)
    period = BudgetPeriodFactory(name="2026-Q4")
    return World(operator, lead, researcher, outsider, lab, nlp, pretrain, eval_, cv, period)


@pytest.fixture
def funded(world):
    """lab holds 5000 GPU-hours, lab/nlp 1000 (nothing split yet), lab/cv 2000."""
    BudgetFactory(team=world.lab, period=world.period, gpu_hours=Decimal(5000))
    BudgetFactory(team=world.nlp, period=world.period, gpu_hours=Decimal(1000))
    BudgetFactory(team=world.cv, period=world.period, gpu_hours=Decimal(2000))
    return world


@pytest.fixture
def rows():
    """Row counts of everything a budgets service may write: compare before and after a refused call."""

    def count():
        return {model.__name__: model.objects.count()
                for model in (Team, Membership, BudgetPeriod, Budget, BudgetChange, LedgerEntry)}

    return count
