"""Copying a period's grants into the next one, and the operators' admin (which goes through the services)."""

from datetime import timedelta
from decimal import Decimal

import pytest

from budgets import selectors, services
from budgets.errors import PermissionDenied, ValidationError
from budgets.models import Budget, BudgetChange, BudgetPeriod, LedgerEntry, Team
from tests.factories import BudgetPeriodFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def next_period(funded):
    w = funded
    services.split_budget(actor=w.lead, team=w.nlp, period=w.period, grants={w.pretrain: 600, w.eval: 300})
    start = w.period.starts_at
    services.charge_usage(budget=Budget.objects.get(team=w.pretrain, period=w.period), job_ref="j",
                          interval_start=start, interval_end=start + timedelta(hours=1), gpu_hours=500)
    return BudgetPeriodFactory(name="2027-Q1", starts_at=w.period.ends_at)


def grants(period):
    return {b.team.path: b.gpu_hours for b in Budget.objects.filter(period=period).select_related("team")}


def test_copy_grants_story(funded, next_period, rows):
    w = funded
    before = rows()
    with pytest.raises(ValidationError, match="lab/nlp has no budget in 2027-Q1"):
        services.copy_grants(actor=w.lead, source_period=w.period, target_period=next_period)
    assert rows() == before
    # The operator copies the whole organisation... then the lead's copy has nothing left to change.
    services.copy_grants(actor=w.operator, source_period=w.period, target_period=next_period)
    assert grants(next_period) == grants(w.period) == {
        "lab": 5000, "lab/cv": 2000, "lab/nlp": 1000, "lab/nlp/eval": 300, "lab/nlp/pretrain": 600}
    audits = BudgetChange.objects.filter(budget__period=next_period)
    assert audits.count() == 5 and {a.reason for a in audits} == {"copied from 2026-Q4"}
    assert {a.actor for a in audits} == {w.operator}
    again = rows()
    services.copy_grants(actor=w.lead, source_period=w.period, target_period=next_period)
    assert rows() == again  # idempotent: nothing differs, nothing is written


def test_a_lead_copies_only_what_they_govern(funded, next_period):
    w = funded
    services.grant_budget(actor=w.operator, team=w.lab, period=next_period, gpu_hours=950)
    services.grant_budget(actor=w.operator, team=w.nlp, period=next_period, gpu_hours=900)
    written = services.copy_grants(actor=w.lead, source_period=w.period, target_period=next_period)
    assert [b.team.path for b in written] == ["lab/nlp/eval", "lab/nlp/pretrain"]
    assert grants(next_period) == {"lab": 950, "lab/nlp": 900, "lab/nlp/eval": 300, "lab/nlp/pretrain": 600}
    assert set(BudgetChange.objects.filter(budget__period=next_period, actor=w.lead)
               .values_list("budget__team__path", flat=True)) == {"lab/nlp/eval", "lab/nlp/pretrain"}


def test_copy_respects_the_tree_rule_all_or_nothing(funded, next_period, rows):
    w = funded
    services.grant_budget(actor=w.operator, team=w.lab, period=next_period, gpu_hours=1000)
    services.grant_budget(actor=w.operator, team=w.nlp, period=next_period, gpu_hours=800)
    before = rows()
    with pytest.raises(ValidationError, match="the children of lab/nlp would receive 900 GPU-hours, but lab/nlp "
                                              "holds 800 in 2027-Q1"):
        services.copy_grants(actor=w.lead, source_period=w.period, target_period=next_period)
    assert rows() == before


def test_carry_over_adds_a_share_of_the_unused_balance(funded, next_period, settings):
    w = funded
    settings.PORTAL = {**settings.PORTAL, "CARRY_OVER_SHARE": 0.5}
    services.grant_budget(actor=w.operator, team=w.lab, period=next_period, gpu_hours=5000)
    services.grant_budget(actor=w.operator, team=w.nlp, period=next_period, gpu_hours=1200)
    services.copy_grants(actor=w.lead, source_period=w.period, target_period=next_period)
    # pretrain: 600 granted, 500 used -> 100 unused -> +50; eval: 300 unused -> +150.
    assert grants(next_period)["lab/nlp/pretrain"] == 650
    assert grants(next_period)["lab/nlp/eval"] == 450


def test_overdrawn_teams_carry_nothing_over(funded, next_period, settings):
    w = funded
    settings.PORTAL = {**settings.PORTAL, "CARRY_OVER_SHARE": 1}
    services.adjust(actor=w.lead, budget=Budget.objects.get(team=w.pretrain, period=w.period), gpu_hours=-700,
                    reason="overdrawn")
    services.grant_budget(actor=w.operator, team=w.lab, period=next_period, gpu_hours=5000)
    services.grant_budget(actor=w.operator, team=w.nlp, period=next_period, gpu_hours=5000)
    services.copy_grants(actor=w.lead, source_period=w.period, target_period=next_period)
    assert grants(next_period)["lab/nlp/pretrain"] == 600


@pytest.mark.parametrize("actor", ["researcher", "outsider"])
def test_non_leads_cannot_copy(funded, next_period, rows, actor):
    before = rows()
    with pytest.raises(PermissionDenied):
        services.copy_grants(actor=getattr(funded, actor), source_period=funded.period, target_period=next_period)
    assert rows() == before


def test_copy_into_the_same_period_is_refused(funded):
    with pytest.raises(ValidationError) as error:
        services.copy_grants(actor=funded.operator, source_period=funded.period, target_period=funded.period)
    assert error.value.field == "target_period"


# --- admin --------------------------------------------------------------------------------------------------------

@pytest.fixture
def operator_client(client, world):
    client.force_login(world.operator)
    return client


def test_admin_pages_answer_with_balances(funded, operator_client):
    w = funded
    nlp = Budget.objects.get(team=w.nlp, period=w.period)
    services.adjust(actor=w.operator, budget=nlp, gpu_hours=-12.5, reason="x")
    page = operator_client.get("/admin/budgets/budget/")
    assert page.status_code == 200
    assert b"987.5" in page.content
    for url in ["/admin/budgets/team/", "/admin/budgets/team/add/", f"/admin/budgets/team/{w.nlp.pk}/change/",
                "/admin/budgets/membership/", "/admin/budgets/budgetperiod/", "/admin/budgets/budgetperiod/add/",
                "/admin/budgets/budget/add/", f"/admin/budgets/budget/{nlp.pk}/change/",
                "/admin/budgets/budgetchange/", "/admin/budgets/ledgerentry/", "/admin/budgets/contract/",
                f"/admin/budgets/ledgerentry/{LedgerEntry.objects.get().pk}/change/"]:
        assert operator_client.get(url).status_code == 200, url


def test_admin_grant_changes_go_through_the_service_and_are_audited(funded, operator_client):
    w = funded
    nlp = Budget.objects.get(team=w.nlp, period=w.period)
    url = f"/admin/budgets/budget/{nlp.pk}/change/"
    answer = operator_client.post(url, {"gpu_hours": "1500", "reason": "via admin",
                                        "changes-TOTAL_FORMS": 0, "changes-INITIAL_FORMS": 0})
    assert answer.status_code == 302, answer.content.decode()[:2000]
    change = BudgetChange.objects.get(budget=nlp)
    assert (change.old_gpu_hours, change.new_gpu_hours, change.actor, change.reason) == \
        (Decimal(1000), Decimal(1500), w.operator, "via admin")
    # A grant breaking the tree rule is shown on the form, and nothing is written.
    services.split_budget(actor=w.lead, team=w.nlp, period=w.period, grants={w.pretrain: 1500})
    answer = operator_client.post(url, {"gpu_hours": "100", "reason": "too low",
                                        "changes-TOTAL_FORMS": 0, "changes-INITIAL_FORMS": 0})
    assert answer.status_code == 200
    assert b"already granted to its children" in answer.content
    assert Budget.objects.get(pk=nlp.pk).gpu_hours == 1500


def test_admin_adds_budgets_teams_and_periods_through_services(funded, operator_client):
    w = funded
    answer = operator_client.post("/admin/budgets/budget/add/", {
        "team": w.eval.pk, "period": w.period.pk, "gpu_hours": "250", "reason": "new",
        "changes-TOTAL_FORMS": 0, "changes-INITIAL_FORMS": 0})
    assert answer.status_code == 302
    assert BudgetChange.objects.get(budget__team=w.eval).new_gpu_hours == 250
    answer = operator_client.post("/admin/budgets/budget/add/", {
        "team": w.pretrain.pk, "period": w.period.pk, "gpu_hours": "751",
        "changes-TOTAL_FORMS": 0, "changes-INITIAL_FORMS": 0})
    assert answer.status_code == 200 and b"would receive 1001" in answer.content
    assert not Budget.objects.filter(team=w.pretrain).exists()

    answer = operator_client.post("/admin/budgets/team/add/", {"name": "Audio", "slug": "audio",
                                                               "parent": w.lab.pk, "description": ""})
    assert answer.status_code == 302
    assert Team.objects.get(slug="audio").path == "lab/audio"
    answer = operator_client.post("/admin/budgets/team/add/", {"name": "Lab", "slug": "lab", "description": ""})
    assert answer.status_code == 200 and b"already exists" in answer.content

    start = w.period.ends_at + timedelta(days=1)
    data = {"name": "2027-Q1", "starts_at_0": start.strftime("%Y-%m-%d"), "starts_at_1": "00:00:00",
            "ends_at_0": (start + timedelta(days=90)).strftime("%Y-%m-%d"), "ends_at_1": "00:00:00"}
    assert operator_client.post("/admin/budgets/budgetperiod/add/", data).status_code == 302
    data["name"] = "overlapping"
    answer = operator_client.post("/admin/budgets/budgetperiod/add/", data)
    assert answer.status_code == 200 and b"overlap 2027-Q1" in answer.content
    assert BudgetPeriod.objects.count() == 2


def test_the_admin_never_adds_changes_or_deletes_ledger_entries_or_audit_rows(funded, operator_client):
    w = funded
    entry = services.adjust(actor=w.operator, budget=Budget.objects.get(team=w.nlp, period=w.period), gpu_hours=1,
                            reason="x")
    assert operator_client.get("/admin/budgets/ledgerentry/add/").status_code == 403
    assert operator_client.post(f"/admin/budgets/ledgerentry/{entry.pk}/delete/", {"post": "yes"}).status_code == 403
    assert operator_client.post(f"/admin/budgets/ledgerentry/{entry.pk}/change/", {"reason": "y"}).status_code == 403
    assert operator_client.get("/admin/budgets/budgetchange/add/").status_code == 403
    assert LedgerEntry.objects.get().reason == "x"
    assert selectors.balance(entry.budget) == 1001


def test_carry_over_of_a_whole_tree_keeps_children_within_their_parent(funded, next_period, settings):
    """The operator copies every grant; each parent grows by its own unused share plus its children's, so the
    copied tree still obeys the split rule (nothing carried twice, nothing refused)."""
    w = funded
    settings.PORTAL = {**settings.PORTAL, "CARRY_OVER_SHARE": 1}
    services.copy_grants(actor=w.operator, source_period=w.period, target_period=next_period)
    copied = grants(next_period)
    # nlp: 1000 split 600/300 -> 100 of its own unused; pretrain 100 unused, eval 300 unused.
    assert copied["lab/nlp/pretrain"] == 700
    assert copied["lab/nlp/eval"] == 600
    assert copied["lab/nlp"] == 1000 + 100 + 100 + 300
    assert copied["lab/nlp/pretrain"] + copied["lab/nlp/eval"] <= copied["lab/nlp"]


def test_admin_memberships_follow_the_lead_rule(world, client):
    """sam is staff with the admin's membership rights and leads lab/cv only: through the admin, as through the
    API, he may add members to lab/cv but not to lab/nlp, change or remove none of lab/nlp's, and the team page's
    member list of lab/nlp is read-only for him (a forged row is ignored)."""
    from django.contrib.auth.models import Permission

    from budgets.models import Membership, Role
    from tests.factories import MembershipFactory, UserFactory

    w = world
    sam = UserFactory(username="sam", is_staff=True)
    sam.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="budgets", codename__in=["add_membership", "change_membership", "delete_membership",
                                                         "view_membership", "view_team", "change_team"]))
    MembershipFactory(user=sam, team=w.cv, role=Role.LEAD)
    client.force_login(sam)

    answer = client.post("/admin/budgets/membership/add/", {"user": w.researcher.pk, "team": w.nlp.pk,
                                                            "role": "member"})
    assert answer.status_code == 200 and b"does not lead lab/nlp" in answer.content
    assert not Membership.objects.filter(user=w.researcher, team=w.nlp).exists()
    answer = client.post("/admin/budgets/membership/add/", {"user": w.researcher.pk, "team": w.cv.pk,
                                                            "role": "member"})
    assert answer.status_code == 302
    assert Membership.objects.get(user=w.researcher, team=w.cv).role == Role.MEMBER

    theirs = Membership.objects.get(user=w.researcher, team=w.pretrain)
    assert client.get(f"/admin/budgets/membership/{theirs.pk}/change/").status_code == 200  # read-only view
    assert client.post(f"/admin/budgets/membership/{theirs.pk}/change/", {"role": "lead"}).status_code == 403
    assert client.post(f"/admin/budgets/membership/{theirs.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Membership.objects.get(pk=theirs.pk).role == Role.MEMBER
    assert b"delete_selected" not in client.get("/admin/budgets/membership/").content

    answer = client.post(f"/admin/budgets/team/{w.nlp.pk}/change/", {
        "name": w.nlp.name, "description": "",
        "memberships-TOTAL_FORMS": 1, "memberships-INITIAL_FORMS": 0,
        "memberships-0-user": sam.pk, "memberships-0-role": "lead"})
    assert answer.status_code == 302
    assert not Membership.objects.filter(user=sam, team=w.nlp).exists()
