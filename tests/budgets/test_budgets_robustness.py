"""Absurd input gets a clear refusal naming the field, never a crash, and nothing is half-written: in the services
(numbers beyond the columns, a slug with a trailing newline) and in the admin (a page refused after its service
ran, bad prefills, bad date-hierarchy years, a period changed by a non-operator)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import Permission

from budgets import services
from budgets.errors import ValidationError
from budgets.models import Budget, BudgetChange, BudgetPeriod
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

ABSURD = ["1e25", Decimal("1e25"), 10**30, 1e300, "-1e25", "1e999999999", "NaN", "Infinity", "-inf",
          float("nan"), float("inf"), Decimal("sNaN"), "100000000000"]


@pytest.mark.parametrize("hours", ABSURD, ids=repr)
def test_grant_budget_refuses_absurd_gpu_hours(funded, rows, hours):
    before = rows()
    with pytest.raises(ValidationError) as error:
        services.grant_budget(actor=funded.operator, team=funded.eval, period=funded.period, gpu_hours=hours)
    assert error.value.field == "gpu_hours"
    assert len(error.value.message) < 200  # "1e999999999" is quoted as such, not written out
    assert rows() == before


def test_the_largest_grant_the_column_holds_is_accepted(funded):
    w = funded
    budget = services.grant_budget(actor=w.operator, team=w.lab, period=w.period, gpu_hours="99999999999.999")
    assert Budget.objects.get(pk=budget.pk).gpu_hours == Decimal("99999999999.999")


@pytest.mark.parametrize("hours", ["1e25", 10**30, "99999999999.99999"], ids=repr)
def test_ledger_services_refuse_absurd_gpu_hours(funded, rows, hours):
    w = funded
    budget = Budget.objects.get(team=w.nlp, period=w.period)
    before = rows()
    now = w.period.starts_at
    calls = [
        lambda: services.charge_usage(budget=budget, job_ref="7", interval_start=now,
                                      interval_end=now + timedelta(hours=1), gpu_hours=hours),
        lambda: services.adjust(actor=w.operator, budget=budget, gpu_hours=hours, reason="x"),
        lambda: services.transfer(actor=w.operator, source=w.nlp, target=w.cv, period=w.period, gpu_hours=hours,
                                  reason="x"),
    ]
    for call in calls:
        with pytest.raises(ValidationError) as error:
            call()
        assert error.value.field == "gpu_hours"
    assert rows() == before


@pytest.mark.parametrize("slug", ["audio\n", "audio\r\n", "\naudio", "audio\x00"], ids=repr)
def test_a_slug_with_a_line_break_is_refused(world, rows, slug):
    before = rows()
    with pytest.raises(ValidationError) as error:
        services.create_team(actor=world.operator, name="Audio", slug=slug, parent=world.lab)
    assert error.value.field == "slug"
    assert rows() == before


# --- admin --------------------------------------------------------------------------------------------------------

@pytest.fixture
def operator_client(client, world):
    client.force_login(world.operator)
    return client


@pytest.mark.parametrize("inline", [{}, {"changes-TOTAL_FORMS": "x", "changes-INITIAL_FORMS": "0"}],
                         ids=["no management form", "bad management form"])
def test_an_admin_grant_refused_after_its_service_ran_writes_nothing(funded, operator_client, rows, inline):
    """The grant form is valid (so grant_budget runs), but the page is refused for its inline: no grant changes
    and no audit row is left behind."""
    nlp = Budget.objects.get(team=funded.nlp, period=funded.period)
    before = rows()
    answer = operator_client.post(f"/admin/budgets/budget/{nlp.pk}/change/",
                                  {"gpu_hours": "1500", "reason": "x", **inline})
    assert answer.status_code == 200
    assert b"ManagementForm data is missing or has been tampered with" in answer.content
    assert rows() == before
    assert Budget.objects.get(pk=nlp.pk).gpu_hours == 1000
    assert not BudgetChange.objects.exists()


def test_an_admin_grant_added_with_a_bad_inline_writes_nothing(funded, operator_client, rows):
    before = rows()
    answer = operator_client.post("/admin/budgets/budget/add/", {
        "team": funded.eval.pk, "period": funded.period.pk, "gpu_hours": "250"})
    assert answer.status_code == 200
    assert rows() == before


@pytest.mark.parametrize("query", [
    "budget/add/?team=abc", "budget/add/?team=999999", "budget/add/?team=99999999999999999999999",
    "budget/add/?period=abc", "budget/add/?gpu_hours=abc", "membership/add/?team=abc", "membership/add/?user=abc",
    "membership/add/?user=99999999999999999999999", "team/add/?parent=abc", "budgetperiod/add/?starts_at=abc",
    "budgetperiod/add/?ends_at=2026-13-45",
])
def test_admin_add_forms_ignore_bad_prefills(funded, operator_client, query):
    assert operator_client.get(f"/admin/budgets/{query}").status_code == 200


def test_admin_add_forms_keep_good_prefills(funded, operator_client):
    page = operator_client.get(f"/admin/budgets/budget/add/?team={funded.eval.pk}&gpu_hours=12")
    assert page.status_code == 200
    assert b"lab/nlp/eval" in page.content and b'value="12"' in page.content
    page = operator_client.get("/admin/budgets/budgetperiod/add/?starts_at=2027-01-01%2000:00")
    assert page.status_code == 200 and b'value="2027-01-01"' in page.content


@pytest.mark.parametrize("query", [
    "budgetperiod/?starts_at__year=9999", "budgetperiod/?starts_at__year=9999&starts_at__month=12",
    "budgetperiod/?starts_at__year=9999&starts_at__month=12&starts_at__day=31",
    "budgetperiod/?starts_at__year=99999999999", "budgetperiod/?starts_at__year=abc",
    "ledgerentry/?created_at__year=9999", "budget/?period__year=abc", "budget/?period__id__exact=99999999999999999999",
])
def test_admin_lists_answer_bad_filters_without_a_server_error(funded, operator_client, query):
    answer = operator_client.get(f"/admin/budgets/{query}")
    assert answer.status_code in (200, 302)
    if answer.status_code == 302:
        assert answer["Location"].endswith("?e=1")


def test_only_operators_change_budget_periods_in_the_admin(world, client):
    """create_period is for superusers; staff with the period permissions cannot move an existing period either."""
    sam = UserFactory(username="sam", is_staff=True)
    sam.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="budgets", codename__in=["view_budgetperiod", "change_budgetperiod"]))
    client.force_login(sam)
    period = world.period
    data = {"name": "renamed", "starts_at_0": period.starts_at.strftime("%Y-%m-%d"), "starts_at_1": "00:00:00",
            "ends_at_0": (period.ends_at + timedelta(days=300)).strftime("%Y-%m-%d"), "ends_at_1": "00:00:00"}
    answer = client.post(f"/admin/budgets/budgetperiod/{period.pk}/change/", data)
    assert answer.status_code == 200 and b"only operators may" in answer.content
    assert BudgetPeriod.objects.get(pk=period.pk).name == period.name
    client.force_login(world.operator)
    assert client.post(f"/admin/budgets/budgetperiod/{period.pk}/change/", data).status_code == 302
    assert BudgetPeriod.objects.get(pk=period.pk).name == "renamed"

