"""Scheduling: clusters, nodes, GPU types, jobs and debug sessions; the pure policy, adapters and simulator.

``scheduling.policy``, ``scheduling.simulation`` and ``scheduling.pyramid`` import no Django.
"""
