"""Races on real PostgreSQL connections (skipped on SQLite, which serialises writers anyway).

Each test holds the first writer's transaction open while the second writer runs on another connection, so the
second one really meets the first one's uncommitted work: the unique index for charges, the parent's row lock for
splits.
"""

import threading
import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from budgets import selectors, services
from budgets.errors import ValidationError
from budgets.models import Budget, BudgetChange, LedgerEntry, Role
from tests.factories import BudgetFactory, BudgetPeriodFactory, MembershipFactory, TeamFactory, UserFactory

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="needs PostgreSQL (set DATABASE_URL)"),
]


def run_in_threads(first, second, hold=0.5):
    """Run ``first`` in a transaction held open ``hold`` seconds after it acted; ``second`` starts once ``first``
    acted. Each on its own connection. Returns ``(result or exception)`` of each."""
    acted = threading.Event()
    results = {}

    def first_worker():
        try:
            with transaction.atomic():
                results["first"] = first()
                acted.set()
                time.sleep(hold)
        except Exception as error:  # noqa: BLE001 - reported to the test
            results["first"] = error
        finally:
            acted.set()
            connections.close_all()

    def second_worker():
        acted.wait(10)
        started = time.monotonic()
        try:
            results["second"] = second()
        except Exception as error:  # noqa: BLE001
            results["second"] = error
        finally:
            results["second_waited"] = time.monotonic() - started
            connections.close_all()

    threads = [threading.Thread(target=first_worker), threading.Thread(target=second_worker)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


@pytest.fixture
def pg_world():
    lead = UserFactory(username="alice")
    lab = TeamFactory(slug="lab")
    nlp = TeamFactory(slug="nlp", parent=lab)
    pretrain = TeamFactory(slug="pretrain", parent=nlp)
    eval_ = TeamFactory(slug="eval", parent=nlp)
    MembershipFactory(user=lead, team=nlp, role=Role.LEAD)
    period = BudgetPeriodFactory(name="2026-Q4")
    BudgetFactory(team=lab, period=period, gpu_hours=Decimal(5000))
    nlp_budget = BudgetFactory(team=nlp, period=period, gpu_hours=Decimal(1000))
    return lead, nlp, pretrain, eval_, period, nlp_budget


def test_two_concurrent_charges_for_the_same_job_and_interval_write_one_row(pg_world):
    *_, budget = pg_world
    start = timezone.now().replace(microsecond=0) - timedelta(hours=1)

    def charge():
        entry, created = services.charge_usage(budget=budget, job_ref="job-7", interval_start=start,
                                               interval_end=start + timedelta(minutes=30), gpu_hours=Decimal(4))
        return entry.pk, created

    results = run_in_threads(charge, charge)
    first, second = results["first"], results["second"]
    assert not isinstance(first, Exception), first
    assert not isinstance(second, Exception), second
    assert results["second_waited"] > 0.3  # it really waited on the first one's uncommitted row
    assert first[1] is True and second == (first[0], False)
    assert LedgerEntry.objects.count() == 1
    assert selectors.balance(budget) == Decimal(996)


def test_two_concurrent_charges_racing_freely_still_write_one_row(pg_world):
    *_, budget = pg_world
    start = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    barrier = threading.Barrier(4)
    results = []

    def worker():
        try:
            barrier.wait(10)
            results.append(services.charge_usage(budget=budget, job_ref="job-8", interval_start=start,
                                                 interval_end=start + timedelta(minutes=30), gpu_hours=2)[1])
        except Exception as error:  # noqa: BLE001
            results.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(results) == [False, False, False, True]
    assert LedgerEntry.objects.count() == 1
    assert selectors.balance(budget) == Decimal(998)


def test_two_concurrent_splits_that_fit_alone_but_not_together(pg_world):
    lead, nlp, pretrain, eval_, period, _ = pg_world

    def split_to(team):
        return lambda: services.split_budget(actor=lead, team=nlp, period=period, grants={team: Decimal(600)})

    results = run_in_threads(split_to(pretrain), split_to(eval_))
    assert isinstance(results["first"], list), results["first"]
    assert isinstance(results["second"], ValidationError), results["second"]
    assert "would receive 1200 GPU-hours, but lab/nlp holds 1000" in results["second"].message
    assert results["second_waited"] > 0.3  # it waited on the parent's row lock
    assert sorted(Budget.objects.filter(team__parent=nlp).values_list("team__slug", "gpu_hours")) == \
        [("pretrain", Decimal(600))]
    assert BudgetChange.objects.count() == 1


def test_a_split_and_a_lowering_of_the_parent_cannot_both_pass(pg_world):
    lead, nlp, pretrain, eval_, period, _ = pg_world
    operator = UserFactory(username="olivia", is_superuser=True)

    first = lambda: services.split_budget(actor=lead, team=nlp, period=period,  # noqa: E731
                                          grants={pretrain: Decimal(800)})
    second = lambda: services.grant_budget(actor=operator, team=nlp, period=period,  # noqa: E731
                                           gpu_hours=Decimal(500))
    results = run_in_threads(first, second)
    assert isinstance(results["second"], ValidationError), results["second"]
    assert Budget.objects.get(team=nlp).gpu_hours == 1000
    assert selectors.children_granted(nlp, period) == 800


def test_two_concurrent_overlapping_periods_cannot_both_be_created():
    operator = UserFactory(username="olivia", is_superuser=True)
    start = timezone.now().replace(microsecond=0) + timedelta(days=400)

    def create(name, offset):
        return lambda: services.create_period(actor=operator, name=name, starts_at=start + timedelta(days=offset),
                                              ends_at=start + timedelta(days=offset + 90))

    results = run_in_threads(create("2028-Q1", 0), create("2028-Q1-bis", 30))
    assert not isinstance(results["first"], Exception), results["first"]
    assert isinstance(results["second"], ValidationError) and "overlap 2028-Q1" in results["second"].message
