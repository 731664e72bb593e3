"""Operators drain, down and heal nodes; every change is audited; capacity reflects health."""

from __future__ import annotations

import pytest

from budgets.errors import ConflictError, PermissionDenied, ValidationError
from scheduling.models import Health, Node, NodeHealthChange
from scheduling.selectors import cluster_capacity
from scheduling.services import set_node_health
from tests.factories import ClusterFactory


@pytest.fixture
def h0(cluster):
    return cluster.nodes.get(name="h0")


def test_olga_drains_a_node_and_the_change_is_audited(h0, operator):
    node = set_node_health(actor=operator, node=h0, health=Health.DRAINING, reason="ECC errors")

    assert node.health == Health.DRAINING
    assert Node.objects.get(pk=h0.pk).health == Health.DRAINING
    change = NodeHealthChange.objects.get()
    assert (change.node, change.old_health, change.new_health, change.actor, change.reason) == (
        h0, "healthy", "draining", operator, "ECC errors")


def test_down_and_back_is_two_audited_changes(h0, operator):
    set_node_health(actor=operator, node=h0, health=Health.DOWN, reason="PSU")
    set_node_health(actor=operator, node=h0, health=Health.HEALTHY, reason="PSU replaced")
    assert list(NodeHealthChange.objects.order_by("id").values_list("old_health", "new_health")) == [
        ("healthy", "down"), ("down", "healthy")]


def test_setting_the_same_health_writes_nothing(h0, operator):
    assert set_node_health(actor=operator, node=h0, health=Health.HEALTHY, reason="checked").health == "healthy"
    assert not NodeHealthChange.objects.exists()


@pytest.mark.parametrize("who", ["lead", "researcher", "outsider"])
def test_only_operators_change_node_health(h0, request, who):
    with pytest.raises(PermissionDenied):
        set_node_health(actor=request.getfixturevalue(who), node=h0, health=Health.DOWN, reason="I want it")
    assert Node.objects.get(pk=h0.pk).health == Health.HEALTHY
    assert not NodeHealthChange.objects.exists()


@pytest.mark.parametrize(("health", "reason", "field"), [("broken", "x", "health"), ("down", "  ", "reason")])
def test_a_bad_health_or_no_reason_is_refused(h0, operator, health, reason, field):
    with pytest.raises(ValidationError) as refused:
        set_node_health(actor=operator, node=h0, health=health, reason=reason)
    assert refused.value.field == field
    assert Node.objects.get(pk=h0.pk).health == Health.HEALTHY
    assert not NodeHealthChange.objects.exists()


def test_a_stale_node_loses_to_the_first_change(h0, operator):
    stale = Node.objects.get(pk=h0.pk)
    set_node_health(actor=operator, node=h0, health=Health.DOWN, reason="PSU")
    with pytest.raises(ConflictError):
        set_node_health(actor=operator, node=stale, health=Health.DRAINING, reason="ECC")
    assert Node.objects.get(pk=h0.pk).health == Health.DOWN
    assert NodeHealthChange.objects.count() == 1


def test_capacity_per_gpu_type_counts_only_healthy_gpus_as_healthy(cluster, operator):
    assert cluster_capacity(cluster) == {"B200": {"nodes": 2, "gpus": 8, "healthy_gpus": 8},
                                         "H100": {"nodes": 4, "gpus": 32, "healthy_gpus": 32}}
    set_node_health(actor=operator, node=cluster.nodes.get(name="h0"), health=Health.DRAINING, reason="r")
    set_node_health(actor=operator, node=cluster.nodes.get(name="b0"), health=Health.DOWN, reason="r")
    set_node_health(actor=operator, node=cluster.nodes.get(name="b1"), health=Health.DOWN, reason="r")
    assert cluster_capacity(cluster) == {"B200": {"nodes": 2, "gpus": 8, "healthy_gpus": 0},
                                         "H100": {"nodes": 4, "gpus": 32, "healthy_gpus": 24}}


def test_an_empty_cluster_has_no_capacity(db):
    assert cluster_capacity(ClusterFactory()) == {}
