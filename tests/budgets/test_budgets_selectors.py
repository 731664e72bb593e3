"""Who sees and governs what, open periods, and balances derived from the ledger."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import AnonymousUser
from django.utils import timezone

from budgets import selectors, services
from budgets.models import Budget, LedgerEntry
from tests.factories import BudgetFactory, BudgetPeriodFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


def paths(queryset):
    return sorted(t.path for t in queryset)


def test_a_lead_governs_the_subtree_and_nothing_else(world):
    w = world
    assert selectors.is_lead_of(w.lead, w.nlp)
    assert selectors.is_lead_of(w.lead, w.pretrain)
    assert not selectors.is_lead_of(w.lead, w.lab)
    assert not selectors.is_lead_of(w.lead, w.cv)
    assert not selectors.is_lead_of(w.researcher, w.pretrain)
    assert not selectors.is_lead_of(w.outsider, w.nlp)
    assert selectors.is_lead_of(w.operator, w.lab)
    assert not selectors.is_lead_of(AnonymousUser(), w.lab)
    assert not selectors.is_lead_of(None, w.lab)


def test_an_inactive_superuser_governs_nothing(world):
    ghost = UserFactory(username="ghost", is_superuser=True, is_active=False)
    assert not selectors.is_lead_of(ghost, world.lab)
    assert paths(selectors.teams_visible_to(ghost)) == []


def test_membership_covers_the_team_and_leads_above(world):
    w = world
    assert selectors.is_member_of(w.researcher, w.pretrain)
    assert not selectors.is_member_of(w.researcher, w.eval)
    assert not selectors.is_member_of(w.researcher, w.nlp)  # a member of a child is not a member of the parent
    assert selectors.is_member_of(w.lead, w.nlp)
    assert selectors.is_member_of(w.lead, w.eval)  # lead of an ancestor
    assert not selectors.is_member_of(w.lead, w.cv)
    assert not selectors.is_member_of(w.outsider, w.pretrain)
    assert selectors.is_member_of(w.operator, w.pretrain)


def test_visible_teams_are_own_subtrees_plus_ancestors(world):
    w = world
    deep = TeamFactory(slug="small", parent=w.pretrain)
    assert paths(selectors.teams_visible_to(w.lead)) == ["lab", "lab/nlp", "lab/nlp/eval", "lab/nlp/pretrain",
                                                         "lab/nlp/pretrain/small"]
    assert paths(selectors.teams_visible_to(w.researcher)) == ["lab", "lab/nlp", "lab/nlp/pretrain",
                                                               deep.path]
    assert paths(selectors.teams_visible_to(w.outsider)) == ["lab", "lab/cv"]
    assert len(selectors.teams_visible_to(w.operator)) == 6
    assert paths(selectors.teams_visible_to(UserFactory(username="nobody"))) == []


def test_slug_prefixes_do_not_leak_into_subtrees(world):
    """lab/nlp must not make lab/nlp2 visible: subtree matching is by whole path segments."""
    nlp2 = TeamFactory(slug="nlp2", parent=world.lab)
    assert nlp2.path not in paths(selectors.teams_visible_to(world.lead))
    assert nlp2.path not in paths(selectors.governed_teams(world.lead))
    assert not selectors.is_lead_of(world.lead, nlp2)


def test_governed_teams(world):
    w = world
    assert paths(selectors.governed_teams(w.lead)) == ["lab/nlp", "lab/nlp/eval", "lab/nlp/pretrain"]
    assert paths(selectors.governed_teams(w.researcher)) == []
    assert len(selectors.governed_teams(w.operator)) == 5


def test_open_period_contains_now_and_excludes_its_end(world):
    now = timezone.now()
    assert selectors.open_period() == world.period
    assert selectors.open_period(world.period.starts_at) == world.period
    assert selectors.open_period(world.period.ends_at) is None
    later = BudgetPeriodFactory(name="2027-Q1", starts_at=world.period.ends_at,
                                ends_at=world.period.ends_at + timedelta(days=90))
    assert selectors.open_period(world.period.ends_at) == later
    assert selectors.open_period(now - timedelta(days=400)) is None


def test_balance_is_unsplit_grant_plus_entries_computed_in_one_query(funded, django_assert_num_queries):
    w = funded
    nlp = Budget.objects.get(team=w.nlp, period=w.period)
    start = timezone.now() - timedelta(hours=2)
    services.charge_usage(budget=nlp, job_ref="j1", interval_start=start, interval_end=start + timedelta(hours=1),
                          gpu_hours=Decimal("12.5"))
    services.adjust(actor=w.operator, budget=nlp, gpu_hours=Decimal("2.25"), reason="fix")
    with django_assert_num_queries(1):
        assert selectors.balance(nlp) == Decimal("989.75")
    with django_assert_num_queries(1):
        all_balances = selectors.balances(w.period)
    assert all_balances[w.nlp.pk] == Decimal("989.75")
    # lab granted 1000 to nlp and 2000 to cv: 2000 of its 5000 remain its own.
    assert all_balances[w.lab.pk] == Decimal(2000)
    assert selectors.subtree_balance(w.lab, w.period) == Decimal("4989.75")
    assert set(all_balances) == {w.lab.pk, w.nlp.pk, w.cv.pk}
    assert selectors.ledger_for(nlp).count() == 2


def test_balance_follows_the_grant_in_the_database_not_a_stale_object(funded):
    nlp = Budget.objects.get(team=funded.nlp, period=funded.period)
    Budget.objects.filter(pk=nlp.pk).update(gpu_hours=Decimal(10))  # someone else changed it
    assert selectors.balance(nlp) == Decimal(10)


def test_children_granted_and_unallocated(funded):
    w = funded
    assert selectors.children_granted(w.nlp, w.period) == 0
    BudgetFactory(team=w.pretrain, period=w.period, gpu_hours=Decimal(600))
    BudgetFactory(team=w.eval, period=w.period, gpu_hours=Decimal("150.5"))
    assert selectors.children_granted(w.nlp, w.period) == Decimal("750.5")
    assert selectors.unallocated(w.nlp, w.period) == Decimal("249.5")
    assert selectors.children_granted(w.lab, w.period) == Decimal(3000)
    assert selectors.unallocated(w.pretrain, w.period) == Decimal(600)
    other = BudgetPeriodFactory(name="other", starts_at=w.period.ends_at)
    assert selectors.unallocated(w.nlp, other) == 0
    assert selectors.budget_for(w.nlp, other) is None
    assert selectors.budget_for(w.nlp, w.period).gpu_hours == Decimal(1000)


def test_ledger_for_is_oldest_first(funded):
    nlp = Budget.objects.get(team=funded.nlp, period=funded.period)
    first = services.adjust(actor=funded.operator, budget=nlp, gpu_hours=1, reason="a")
    second = services.adjust(actor=funded.operator, budget=nlp, gpu_hours=-1, reason="b")
    assert list(selectors.ledger_for(nlp)) == [first, second]
    assert LedgerEntry.objects.count() == 2


def test_balances_are_exact_decimals_on_every_database(funded):
    """SQLite computes decimal sums in floating point; the balance must still come back to the ledger's cent."""
    w = funded
    services.split_budget(actor=w.operator, team=w.nlp, period=w.period, grants={w.pretrain: Decimal("0.003")})
    nlp = Budget.objects.get(team=w.nlp, period=w.period)
    start = timezone.now() - timedelta(hours=2)
    services.charge_usage(budget=nlp, job_ref="j1", interval_start=start, interval_end=start + timedelta(hours=1),
                          gpu_hours=Decimal("933.359"))
    assert selectors.balance(nlp) == Decimal("66.638")
    assert str(selectors.balances(w.period)[w.nlp.pk]) == "66.6380"
    assert selectors.subtree_balance(w.nlp, w.period) == Decimal("66.641")
