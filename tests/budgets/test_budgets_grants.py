"""Granting and splitting budgets down the tree: the children never exceed the parent; every change is audited."""

from decimal import Decimal

import pytest

from budgets import selectors, services
from budgets.errors import PermissionDenied, ValidationError
from budgets.models import Budget, BudgetChange
from tests.factories import BudgetFactory, BudgetPeriodFactory, TeamFactory

pytestmark = pytest.mark.django_db


def grant_of(team, period):
    return Budget.objects.get(team=team, period=period).gpu_hours


def test_the_lead_splits_their_budget_among_children_and_keeps_a_remainder(funded):
    w = funded
    budgets = services.split_budget(actor=w.lead, team=w.nlp, period=w.period,
                                    grants={w.pretrain: Decimal(600), w.eval: Decimal(300)}, reason="Q4 plan")
    assert [b.team for b in budgets] == [w.eval, w.pretrain]
    assert grant_of(w.pretrain, w.period) == 600
    assert selectors.unallocated(w.nlp, w.period) == 100
    changes = BudgetChange.objects.filter(budget__period=w.period).order_by("budget__team__path")
    assert [(c.budget.team.path, c.old_gpu_hours, c.new_gpu_hours, c.actor, c.reason) for c in changes] == [
        ("lab/nlp/eval", None, Decimal(300), w.lead, "Q4 plan"),
        ("lab/nlp/pretrain", None, Decimal(600), w.lead, "Q4 plan"),
    ]


def test_a_child_cannot_receive_more_than_the_parent_holds(funded, rows):
    w = funded
    before = rows()
    with pytest.raises(ValidationError) as error:
        services.split_budget(actor=w.lead, team=w.nlp, period=w.period,
                              grants={w.pretrain: Decimal(700), w.eval: Decimal(500)})
    assert error.value.field == "grants"
    assert error.value.message == ("the children of lab/nlp would receive 1200 GPU-hours, but lab/nlp holds 1000 "
                                   "in 2026-Q4")
    assert rows() == before  # all or nothing: not even pretrain's 700 was written


def test_a_single_grant_over_the_parent_names_the_field(funded, rows):
    w = funded
    services.grant_budget(actor=w.lead, team=w.pretrain, period=w.period, gpu_hours=Decimal(800))
    before = rows()
    with pytest.raises(ValidationError) as error:
        services.grant_budget(actor=w.lead, team=w.eval, period=w.period, gpu_hours=Decimal("200.001"))
    assert str(error.value) == ("gpu_hours: the children of lab/nlp would receive 1000.001 GPU-hours, but lab/nlp "
                                "holds 1000 in 2026-Q4")
    assert rows() == before
    services.grant_budget(actor=w.lead, team=w.eval, period=w.period, gpu_hours=Decimal(200))  # exactly fits


def test_raising_one_child_counts_the_siblings_already_granted(funded):
    w = funded
    services.split_budget(actor=w.lead, team=w.nlp, period=w.period, grants={w.pretrain: 600, w.eval: 400})
    with pytest.raises(ValidationError, match="would receive 1100"):
        services.grant_budget(actor=w.lead, team=w.eval, period=w.period, gpu_hours=500)
    # Moving grant between siblings in one split is fine: lower one, raise the other.
    services.split_budget(actor=w.lead, team=w.nlp, period=w.period, grants={w.pretrain: 500, w.eval: 500})
    assert grant_of(w.eval, w.period) == 500


@pytest.mark.parametrize("actor", ["researcher", "outsider"])
def test_a_non_lead_cannot_split(funded, rows, actor):
    w = funded
    before = rows()
    with pytest.raises(PermissionDenied) as error:
        services.split_budget(actor=getattr(w, actor), team=w.nlp, period=w.period, grants={w.pretrain: 10})
    assert "does not lead lab/nlp" in error.value.message
    with pytest.raises(PermissionDenied):
        services.grant_budget(actor=getattr(w, actor), team=w.pretrain, period=w.period, gpu_hours=10)
    assert rows() == before


def test_a_lead_cannot_raise_their_own_grant(funded, rows):
    w = funded
    before = rows()
    with pytest.raises(PermissionDenied, match="own team's grant") as error:
        services.grant_budget(actor=w.lead, team=w.nlp, period=w.period, gpu_hours=Decimal(4000))
    assert error.value.field == "gpu_hours"
    assert grant_of(w.nlp, w.period) == 1000
    assert rows() == before


def test_only_operators_grant_a_root_team(funded):
    w = funded
    with pytest.raises(PermissionDenied, match="root team"):
        services.grant_budget(actor=w.lead, team=w.lab, period=w.period, gpu_hours=1)
    services.grant_budget(actor=w.operator, team=w.lab, period=w.period, gpu_hours=9000, reason="new hardware")
    assert grant_of(w.lab, w.period) == 9000


def test_lowering_below_the_childrens_sum_is_refused(funded, rows):
    w = funded
    services.split_budget(actor=w.lead, team=w.nlp, period=w.period, grants={w.pretrain: 600, w.eval: 200})
    before = rows()
    with pytest.raises(ValidationError) as error:
        services.grant_budget(actor=w.operator, team=w.nlp, period=w.period, gpu_hours=Decimal(700))
    assert error.value.message == ("lab/nlp would hold 700 GPU-hours in 2026-Q4, less than the 800 already granted "
                                   "to its children")
    assert rows() == before
    assert services.grant_budget(actor=w.operator, team=w.nlp, period=w.period, gpu_hours=800).gpu_hours == 800


def test_the_parent_needs_a_budget_in_the_period(world, rows):
    w = world
    BudgetFactory(team=w.lab, period=w.period, gpu_hours=100)
    before = rows()
    with pytest.raises(ValidationError, match="lab/nlp has no budget in 2026-Q4") as error:
        services.grant_budget(actor=w.lead, team=w.pretrain, period=w.period, gpu_hours=10)
    assert error.value.field == "gpu_hours"
    assert rows() == before


def test_budgets_of_other_periods_do_not_count(funded):
    w = funded
    other = BudgetPeriodFactory(name="2027-Q1", starts_at=w.period.ends_at)
    BudgetFactory(team=w.nlp, period=other, gpu_hours=5)
    services.grant_budget(actor=w.lead, team=w.pretrain, period=w.period, gpu_hours=1000)
    with pytest.raises(ValidationError, match="holds 5 in 2027-Q1"):
        services.grant_budget(actor=w.lead, team=w.pretrain, period=other, gpu_hours=6)


def test_every_change_is_audited_with_old_and_new_and_no_change_writes_nothing(funded):
    w = funded
    services.grant_budget(actor=w.lead, team=w.pretrain, period=w.period, gpu_hours=100, reason="start")
    services.grant_budget(actor=w.lead, team=w.pretrain, period=w.period, gpu_hours="250.5", reason="more data")
    services.grant_budget(actor=w.lead, team=w.pretrain, period=w.period, gpu_hours=Decimal("250.500"))
    services.split_budget(actor=w.lead, team=w.nlp, period=w.period, grants={w.pretrain: Decimal("250.5")})
    budget = Budget.objects.get(team=w.pretrain, period=w.period)
    history = [(c.old_gpu_hours, c.new_gpu_hours, c.actor, c.reason) for c in selectors.grant_history(budget)]
    assert history == [(Decimal(100), Decimal("250.5"), w.lead, "more data"), (None, Decimal(100), w.lead, "start")]


@pytest.mark.parametrize("bad", [Decimal("NaN"), Decimal("Infinity"), float("inf"), float("nan"), Decimal(-1), -0.5,
                                 "lots", "", None, True, [], Decimal("1.0001"), Decimal("1e11")])
def test_bad_gpu_hours_are_refused_naming_the_field(funded, rows, bad):
    before = rows()
    with pytest.raises(ValidationError) as error:
        services.grant_budget(actor=funded.lead, team=funded.pretrain, period=funded.period, gpu_hours=bad)
    assert error.value.field == "gpu_hours"
    assert rows() == before


def test_numbers_in_any_plain_form_are_accepted(funded):
    w = funded
    assert services.grant_budget(actor=w.lead, team=w.pretrain, period=w.period, gpu_hours=" 12.5 ").gpu_hours \
        == Decimal("12.5")
    assert services.grant_budget(actor=w.lead, team=w.pretrain, period=w.period, gpu_hours=7).gpu_hours == 7
    assert services.grant_budget(actor=w.lead, team=w.pretrain, period=w.period, gpu_hours=0.1).gpu_hours \
        == Decimal("0.1")
    assert services.grant_budget(actor=w.lead, team=w.pretrain, period=w.period, gpu_hours=0).gpu_hours == 0


def test_split_only_touches_direct_children(funded, rows):
    w = funded
    grandchild = TeamFactory(slug="small", parent=w.pretrain)
    before = rows()
    for grants in ({grandchild: 1}, {w.cv: 1}, {w.nlp: 1}, {}, {"lab/nlp/pretrain": 1}):
        with pytest.raises(ValidationError) as error:
            services.split_budget(actor=w.lead, team=w.nlp, period=w.period, grants=grants)
        assert error.value.field == "grants"
    with pytest.raises(ValidationError) as error:
        services.split_budget(actor=w.lead, team=w.nlp, period=w.period, grants={w.eval: 1, w.pretrain: "x"})
    assert error.value.field == "grants[lab/nlp/pretrain]"
    assert rows() == before


def test_an_operator_can_split_anywhere(funded):
    w = funded
    services.split_budget(actor=w.operator, team=w.lab, period=w.period, grants={w.nlp: 3000, w.cv: 2000})
    assert selectors.unallocated(w.lab, w.period) == 0
    with pytest.raises(ValidationError, match="would receive 5001"):
        services.split_budget(actor=w.operator, team=w.lab, period=w.period, grants={w.nlp: 3001})
