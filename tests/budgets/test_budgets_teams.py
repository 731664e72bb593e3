"""Teams, memberships and periods: who may create what, and clear errors instead of IntegrityErrors."""

from datetime import datetime, timedelta, timezone as dt_timezone

import pytest

from budgets import services
from budgets.errors import ConflictError, DomainError, PermissionDenied, ValidationError
from budgets.models import Membership, Role, Team
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
UTC = dt_timezone.utc


def test_errors_carry_field_and_message():
    error = ValidationError("the children of lab/nlp would receive 1200 GPU-hours", field="gpu_hours")
    assert isinstance(error, DomainError)
    assert str(error) == "gpu_hours: the children of lab/nlp would receive 1200 GPU-hours"
    assert error.as_dict() == {"field": "gpu_hours", "message": "the children of lab/nlp would receive 1200 GPU-hours"}
    assert (PermissionDenied("x").status_code, ValidationError("x").status_code, ConflictError("x").status_code) \
        == (403, 400, 409)
    assert str(PermissionDenied("no")) == "no"


def test_a_lead_creates_a_child_team_with_its_path(world):
    team = services.create_team(actor=world.lead, name="Safety", slug="safety", parent=world.nlp)
    assert team.path == "lab/nlp/safety"
    deeper = services.create_team(actor=world.lead, name="Red team", slug="red-team", parent=team)
    assert deeper.path == "lab/nlp/safety/red-team"


def test_only_operators_create_root_teams(world, rows):
    before = rows()
    with pytest.raises(PermissionDenied) as error:
        services.create_team(actor=world.lead, name="Other", slug="other")
    assert error.value.field == "parent"
    assert rows() == before
    assert services.create_team(actor=world.operator, name="Other", slug="other").path == "other"


@pytest.mark.parametrize("actor", ["researcher", "outsider"])
def test_non_leads_cannot_create_child_teams(world, rows, actor):
    before = rows()
    with pytest.raises(PermissionDenied, match="does not lead lab/nlp"):
        services.create_team(actor=getattr(world, actor), name="X", slug="x", parent=world.nlp)
    assert rows() == before


def test_a_lead_cannot_create_beside_their_team(world):
    with pytest.raises(PermissionDenied):
        services.create_team(actor=world.lead, name="Audio", slug="audio", parent=world.lab)


@pytest.mark.parametrize("slug", ["", "Has Caps", "a/b", "-lead", "trail-", "x" * 51, "ünï", None])
def test_bad_slugs_are_refused_naming_the_field(world, slug):
    with pytest.raises(ValidationError) as error:
        services.create_team(actor=world.lead, name="X", slug=slug, parent=world.nlp)
    assert error.value.field == "slug"


def test_a_blank_name_is_refused(world):
    with pytest.raises(ValidationError) as error:
        services.create_team(actor=world.lead, name="  ", slug="ok", parent=world.nlp)
    assert error.value.field == "name"


def test_a_taken_slug_among_siblings_is_a_clear_error(world, rows):
    before = rows()
    with pytest.raises(ValidationError, match="already exists under lab/nlp") as error:
        services.create_team(actor=world.lead, name="Again", slug="pretrain", parent=world.nlp)
    assert error.value.field == "slug"
    assert rows() == before
    # The same slug elsewhere in the tree is fine.
    assert services.create_team(actor=world.operator, name="P", slug="pretrain", parent=world.cv).path \
        == "lab/cv/pretrain"


def test_a_taken_root_slug_is_a_clear_error(world):
    with pytest.raises(ValidationError, match="among the root teams"):
        services.create_team(actor=world.operator, name="Lab again", slug="lab")
    assert Team.objects.filter(slug="lab").count() == 1


def test_leads_manage_memberships_below_them(world):
    w = world
    newcomer = UserFactory(username="dana")
    membership = services.add_membership(actor=w.lead, team=w.eval, user=newcomer, role=Role.MEMBER)
    assert membership.role == Role.MEMBER
    promoted = services.add_membership(actor=w.lead, team=w.eval, user=newcomer, role=Role.LEAD)
    assert promoted.pk == membership.pk and promoted.role == Role.LEAD
    assert Membership.objects.filter(user=newcomer).count() == 1
    services.remove_membership(actor=w.lead, team=w.eval, user=newcomer)
    assert not Membership.objects.filter(user=newcomer).exists()


@pytest.mark.parametrize("actor", ["researcher", "outsider"])
def test_non_leads_cannot_manage_memberships(world, actor):
    w = world
    with pytest.raises(PermissionDenied):
        services.add_membership(actor=getattr(w, actor), team=w.pretrain, user=w.outsider, role=Role.LEAD)
    with pytest.raises(PermissionDenied):
        services.remove_membership(actor=getattr(w, actor), team=w.pretrain, user=w.researcher)
    assert Membership.objects.get(user=w.researcher).team == w.pretrain
    assert not Membership.objects.filter(user=w.outsider, team=w.pretrain).exists()


def test_a_lead_cannot_grant_themselves_a_lead_role_above(world):
    with pytest.raises(PermissionDenied):
        services.add_membership(actor=world.lead, team=world.lab, user=world.lead, role=Role.LEAD)


def test_membership_input_errors(world):
    with pytest.raises(ValidationError) as error:
        services.add_membership(actor=world.lead, team=world.eval, user=world.outsider, role="owner")
    assert error.value.field == "role"
    with pytest.raises(ValidationError) as error:
        services.remove_membership(actor=world.lead, team=world.eval, user=world.outsider)
    assert error.value.field == "user"


def test_operators_create_periods_that_never_overlap(world, rows):
    w = world
    start = w.period.ends_at
    q1 = services.create_period(actor=w.operator, name="2027-Q1", starts_at=start,
                                ends_at=start + timedelta(days=90))
    assert q1.pk
    before = rows()
    with pytest.raises(ValidationError, match="overlap 2027-Q1") as error:
        services.create_period(actor=w.operator, name="2027-Q1b", starts_at=start + timedelta(days=89),
                               ends_at=start + timedelta(days=100))
    assert error.value.field == "starts_at"
    with pytest.raises(ValidationError, match="overlap 2026-Q4"):
        services.create_period(actor=w.operator, name="inside", starts_at=w.period.starts_at + timedelta(days=1),
                               ends_at=w.period.starts_at + timedelta(days=2))
    with pytest.raises(ValidationError) as error:
        services.create_period(actor=w.operator, name="backwards", starts_at=start + timedelta(days=200),
                               ends_at=start + timedelta(days=100))
    assert error.value.field == "ends_at"
    with pytest.raises(ValidationError) as error:
        services.create_period(actor=w.operator, name="2027-Q1", starts_at=start + timedelta(days=300),
                               ends_at=start + timedelta(days=400))
    assert error.value.field == "name"
    with pytest.raises(ValidationError) as error:
        services.create_period(actor=w.operator, name="naive", starts_at=datetime(2030, 1, 1),
                               ends_at=datetime(2030, 2, 1))
    assert error.value.field == "starts_at"
    assert rows() == before


@pytest.mark.parametrize("actor", ["lead", "researcher", "outsider"])
def test_only_operators_create_periods(world, actor):
    with pytest.raises(PermissionDenied):
        services.create_period(actor=getattr(world, actor), name="2030", starts_at=datetime(2030, 1, 1, tzinfo=UTC),
                               ends_at=datetime(2031, 1, 1, tzinfo=UTC))
