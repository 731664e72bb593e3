"""Re-read a schedule CSV (``--schedule DIR``) and verify that no GPU was ever given twice.

Pure: ``check_schedule(path, capacity)`` returns the list of problems (empty when the schedule is sound), each a
plain sentence naming the node, the time and the jobs involved.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping

from scheduling.policy.types import NodeState

COLUMNS = ("job_id", "team", "gpus", "placement", "start_s", "end_s", "end_reason")
END_REASONS = {"completed", "preempted", "drained", "window_end", "released", "timeout"}


def capacity_of(nodes: tuple[NodeState, ...] | Mapping[str, int]) -> dict[str, int]:
    if isinstance(nodes, Mapping):
        return dict(nodes)
    return {n.id: n.gpus for n in nodes}


def check_schedule(path: str, capacity: Mapping[str, int] | tuple[NodeState, ...]) -> list[str]:
    """Problems found in the schedule at ``path`` given each node's GPU count (empty list: sound).

    Checks: the header; each row's placement adds up to its GPUs, names known nodes, and ends after it starts;
    a job never has two overlapping allocations; and at no instant does any node hold more GPUs than it has
    (an allocation ending at t and one starting at t do not overlap). Given the nodes themselves (not only their
    sizes), also that no placement spans two GPU types.
    """
    cap = capacity_of(capacity)
    gpu_type = {n.id: n.gpu_type for n in capacity} if not isinstance(capacity, Mapping) else {}
    problems: list[str] = []
    events: dict[str, list[tuple[float, int, int, str]]] = {}
    by_job: dict[str, list[tuple[float, float]]] = {}
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            return [f"{path}: missing columns {', '.join(missing)}"]
        for lineno, row in enumerate(reader, start=2):
            where = f"{path}:{lineno}"
            try:
                gpus = int(row["gpus"])
                start, end = float(row["start_s"]), float(row["end_s"])
            except ValueError:
                problems.append(f"{where}: bad number in gpus/start_s/end_s")
                continue
            if end < start:
                problems.append(f"{where}: job {row['job_id']} ends ({end}) before it starts ({start})")
            if row["end_reason"] not in END_REASONS:
                problems.append(f"{where}: unknown end_reason {row['end_reason']!r}")
            total = 0
            types: set[str] = set()
            for part in filter(None, row["placement"].split(";")):
                node, _, g = part.rpartition(":")
                try:
                    n = int(g)
                except ValueError:
                    problems.append(f"{where}: bad placement part {part!r}")
                    continue
                if node not in cap:
                    problems.append(f"{where}: unknown node {node!r}")
                    continue
                total += n
                if node in gpu_type:
                    types.add(gpu_type[node])
                if end > start:
                    events.setdefault(node, []).append((start, 1, n, row["job_id"]))
                    events.setdefault(node, []).append((end, 0, -n, row["job_id"]))
            if total != gpus:
                problems.append(f"{where}: job {row['job_id']} has {gpus} GPUs but its placement gives {total}")
            if len(types) > 1:
                problems.append(f"{where}: job {row['job_id']} spans GPU types {', '.join(sorted(types))}")
            by_job.setdefault(row["job_id"], []).append((start, end))
    for job, spans in by_job.items():
        spans.sort()
        for (s1, e1), (s2, e2) in zip(spans, spans[1:]):
            if s2 < e1:
                problems.append(f"job {job} holds two allocations at once ({s1}-{e1} and {s2}-{e2})")
    for node, evs in sorted(events.items()):
        evs.sort()  # at equal times ends (0) come before starts (1)
        held = 0
        holders: set[str] = set()
        for t, _, delta, job in evs:
            held += delta
            if delta > 0:
                holders.add(job)
            else:
                holders.discard(job)
            if held > cap[node]:
                problems.append(
                    f"node {node} holds {held} GPUs of {cap[node]} at t={t:g} (jobs {', '.join(sorted(holders))})"
                )
    return problems
