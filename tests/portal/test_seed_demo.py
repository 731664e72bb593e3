"""`seed_demo` builds a usable demo organisation, and running it again changes nothing."""

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from budgets.models import Budget, Contract, Membership, Team
from scheduling.models import Cluster, Node


@pytest.fixture
def seeded(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    out = StringIO()
    call_command("seed_demo", stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_demo_has_a_three_level_tree_with_leads_and_researchers(seeded):
    assert Team.objects.count() >= 10
    assert max(t.depth for t in Team.objects.all()) == 2
    for team in Team.objects.all():
        assert Membership.objects.filter(team=team, role="lead").exists(), team.path
    assert {c.name for c in Contract.objects.all()} >= {"scavenger", "standard", "long", "debug"}
    cluster = Cluster.objects.get(name="demo")
    assert {n.gpu_type.name for n in Node.objects.filter(cluster=cluster)} == {"H100", "B200"}


@pytest.mark.django_db
def test_children_grants_never_exceed_their_parent(seeded):
    for budget in Budget.objects.select_related("team"):
        children = Budget.objects.filter(team__parent=budget.team, period=budget.period)
        assert sum(b.gpu_hours for b in children) <= budget.gpu_hours, budget.team.path


@pytest.mark.django_db
def test_printed_password_logs_into_the_admin(seeded, client):
    password = seeded.split("Password for every demo account: ")[1].split()[0]
    assert client.login(username="operator", password=password)
    page = client.get("/admin/budgets/team/")
    assert page.status_code == 200
    assert b"lab/language/pretrain" in page.content


@pytest.mark.django_db
def test_seeding_twice_creates_nothing_and_keeps_edits(seeded, settings):
    budget = Budget.objects.get(team__path="lab/vision/detection")
    budget.gpu_hours = 1234
    budget.save()
    counts = (Team.objects.count(), get_user_model().objects.count(), Budget.objects.count(), Node.objects.count())
    out = StringIO()
    call_command("seed_demo", stdout=out)
    assert "already present" in out.getvalue()
    assert counts == (Team.objects.count(), get_user_model().objects.count(), Budget.objects.count(),
                      Node.objects.count())
    assert Budget.objects.get(team__path="lab/vision/detection").gpu_hours == 1234
