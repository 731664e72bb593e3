"""factory_boy factories for every model: tests build exactly the world their story needs."""

from datetime import timedelta
from decimal import Decimal

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone

from budgets.models import Budget, BudgetPeriod, Contract, Membership, Queue, Role, Team
from scheduling.models import Cluster, DebugSession, GPUType, Job, Node


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("correct horse battery")


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team

    name = factory.Sequence(lambda n: f"Team {n}")
    slug = factory.Sequence(lambda n: f"team{n}")
    parent = None


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    team = factory.SubFactory(TeamFactory)
    role = Role.MEMBER


class BudgetPeriodFactory(factory.django.DjangoModelFactory):
    """The period open now: from 10 days ago to 20 days ahead."""

    class Meta:
        model = BudgetPeriod

    name = factory.Sequence(lambda n: f"period-{n}")
    starts_at = factory.LazyFunction(lambda: timezone.now() - timedelta(days=10))
    ends_at = factory.LazyAttribute(lambda o: o.starts_at + timedelta(days=30))


class BudgetFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Budget

    team = factory.SubFactory(TeamFactory)
    period = factory.SubFactory(BudgetPeriodFactory)
    gpu_hours = Decimal("1000")


class ContractFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Contract
        django_get_or_create = ("name",)

    name = "standard"
    queue = Queue.BATCH
    protected_minutes = 120
    grace_seconds = 600
    max_runtime_minutes = None
    price_factor = Decimal("1.0")
    requeue_on_preemption = True


class GPUTypeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GPUType
        django_get_or_create = ("name",)

    name = "H100"
    price_factor = Decimal("1.0")


class ClusterFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Cluster

    name = factory.Sequence(lambda n: f"cluster{n}")


class NodeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Node

    cluster = factory.SubFactory(ClusterFactory)
    name = factory.Sequence(lambda n: f"node{n:03d}")
    gpu_type = factory.SubFactory(GPUTypeFactory)
    gpus = 8


class JobFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Job

    name = factory.Sequence(lambda n: f"job{n}")
    team = factory.SubFactory(TeamFactory)
    user = factory.SubFactory(UserFactory)
    cluster = factory.SubFactory(ClusterFactory)
    contract = factory.SubFactory(ContractFactory)
    gpu_type = factory.SubFactory(GPUTypeFactory)
    gpus = 1


class DebugSessionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = DebugSession

    job = factory.SubFactory(JobFactory)
    starts_at = factory.LazyFunction(timezone.now)
    ends_at = factory.LazyAttribute(lambda o: o.starts_at + timedelta(hours=2))
