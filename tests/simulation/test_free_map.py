"""The baselines' placement (scheduling/simulation/placement.py, FreeMap): what a baseline may start where. A baseline
that places a job where no scheduler could, or never where one could, is no honest comparison."""

from __future__ import annotations

from scheduling.policy.types import NodeState
from scheduling.simulation.placement import FreeMap


def nodes(*specs: tuple[str, str, int], down: tuple[str, ...] = ()) -> list[NodeState]:
    return [NodeState(id=i, gpu_type=t, gpus=g, health="down" if i in down else "healthy") for i, t, g in specs]


def test_a_node_that_is_down_holds_nothing_and_the_nodes_after_it_still_do():
    fm = FreeMap(nodes(("a", "H100", 8), ("b", "H100", 8), ("c", "H100", 8), down=("a",)))
    assert fm.free_total() == 16 and fm.place(8) == (("b", 8),)
    assert fm.place(16) == (("b", 8), ("c", 8)) and fm.place(17) is None
    assert not fm.can_ever_fit(17, None)


def test_what_can_ever_fit_is_counted_per_gpu_type_and_per_node_shape():
    fm = FreeMap(nodes(("h1", "H100", 8), ("h2", "H100", 4), ("h3", "H100", 4), ("b1", "B200", 8), ("b2", "B200", 8)))
    assert fm.can_ever_fit(16, "H100") and not fm.can_ever_fit(17, "H100")
    assert fm.can_ever_fit(16, "B200") and not fm.can_ever_fit(1, "B300")
    assert not fm.can_ever_fit(16, "H100", gpus_per_node=8)  # one H100 node holds 8; the B200 nodes do not count
    assert fm.can_ever_fit(16, "B200", gpus_per_node=8) and fm.can_ever_fit(16, None, gpus_per_node=8)
    assert not fm.can_ever_fit(17, None)  # a job of any type never spans types: 16 of each at most


def test_free_gpus_are_kept_per_type_as_jobs_take_and_give_them():
    fm = FreeMap(nodes(("h", "H100", 8), ("b", "B200", 4)))
    assert (fm.free_total(), fm.free_total("H100"), fm.free_total("B200"), fm.free_total("B300")) == (12, 8, 4, 0)
    fm.take((("h", 3),))
    assert (fm.free_total(), fm.free_total("H100"), fm.free_total("B200")) == (9, 5, 4)
    assert fm.place(6, "H100") is None and fm.place(4, "B200") == (("b", 4),)
    fm.give((("h", 3),))
    assert (fm.free_total(), fm.free_total("H100")) == (12, 8) and fm.place(6, "H100") == (("h", 6),)


def test_a_job_larger_than_its_types_nodes_spans_them_even_where_another_type_has_larger_nodes():
    # the B200 nodes hold 8, the H100 nodes 4: 6 H100 GPUs span two H100 nodes rather than wait for an 8-GPU one
    fm = FreeMap(nodes(("b", "B200", 8), ("h1", "H100", 4), ("h2", "H100", 4)))
    assert fm.place(6, "H100") == (("h1", 4), ("h2", 2))
    fm = FreeMap(nodes(("h1", "H100", 4), ("h2", "H100", 4), ("b", "B200", 8)))  # in either order
    assert fm.place(6, "H100") == (("h1", 4), ("h2", 2))


def test_a_failed_shape_says_nothing_of_a_larger_job_of_another_shape():
    fm = FreeMap(nodes(("a", "H100", 8), ("b", "H100", 8)))
    assert fm.place(12, gpus_per_node=8) is None  # not a multiple of its shape
    assert fm.place(16, gpus_per_node=8) == (("a", 8), ("b", 8))
    fm.take((("a", 2), ("b", 2)))
    assert fm.place(8) is None  # no node has 8 free: a job of one node waits
    assert fm.place(12) == (("a", 6), ("b", 6))  # a job larger than any node spans them


def test_a_job_of_any_type_keeps_its_shape_and_stays_on_one_type_on_a_mixed_cluster():
    fm = FreeMap(nodes(("h1", "H100", 8), ("h2", "H100", 8), ("h3", "H100", 8), ("b1", "B200", 8)))
    fm.take((("h2", 4), ("h3", 4)))
    assert fm.place(16, None, gpus_per_node=8) is None  # 8 + 4 + 4 H100s would span, but not in its shape
    assert fm.place(16) == (("h1", 8), ("h2", 4), ("h3", 4))
    avail = {"h1": 8, "h2": 8, "h3": 0, "b1": 8}  # a baseline's own view (GPUs it counts as freeing)
    assert fm.place(16, None, gpus_per_node=8, avail=avail) == (("h1", 8), ("h2", 8))
