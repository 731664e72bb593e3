"""Inputs of a replay: job traces (normalized or Philly), budget files and cluster specs, all validated.

Every problem in an input file raises :class:`TraceError` naming the file, the line (1 = the header) and the
field, so ``python -m scheduling.simulation`` can print ``error: FILE:LINE: field: message``.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

from scheduling.policy.types import NodeState

DAY_S = 86400.0
# A run longer than this is not a run time in seconds (a unit or export error): refused, since a replay without
# --days runs until every job has ended, and such a job would keep it going for ever.
MAX_DURATION_S = 100 * 365 * DAY_S
# The largest grant a budget row may give: 10^12 GPU-hours is a million GPUs for over a century. Beyond it a value is
# a typo, and sums of values near the float limit overflow (NaN entitlements deep in the pyramid).
MAX_GPU_HOURS = 1e12


class TraceError(ValueError):
    """A bad input file: names the file, the line (0 when it is about the whole file) and the field."""

    def __init__(self, path: str, line: int, field: str, message: str) -> None:
        self.path, self.line, self.field, self.message = str(path), line, field, message
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.field}: {self.message}"


@dataclass(frozen=True, slots=True)
class TraceJob:
    id: str
    submit_s: float  # relative to the window start
    team: str
    gpus: int
    duration_s: float
    user: str = ""
    gpu_type: str | None = None
    kind: str = "train"  # train | debug | eval
    utilization: float | None = None
    priority: str | None = None  # "high" | "low" (static-priority baseline only)
    time_limit_s: float | None = None  # the user's run-time limit (a run is stopped when it reaches it)
    line: int = 0  # where it came from, for messages


# ---- budgets -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Budgets:
    """The team tree of a budget file: grants (GPU-hours) by team path, parents by path.

    Ancestors that the file does not list are implied, with a grant equal to the sum of their children's.
    """

    grant: dict[str, float]
    parent: dict[str, str | None]
    path: str = ""

    @property
    def teams(self) -> list[str]:
        return sorted(self.grant)

    def leaves(self) -> list[str]:
        parents = {p for p in self.parent.values() if p is not None}
        return [t for t in self.teams if t not in parents]

    def shares(self) -> dict[str, float]:
        """Each leaf's share of the whole: the product of (grant / sum of sibling grants) down the tree."""
        out: dict[str, float] = {}
        kids: dict[str | None, list[str]] = {}
        for t in self.teams:
            kids.setdefault(self.parent[t], []).append(t)

        def walk(team: str | None, share: float) -> None:
            children = kids.get(team, [])
            total = sum(self.grant[c] for c in children)
            if team is not None:
                own = max(0.0, self.grant[team] - total) if children else self.grant[team]
                denom = self.grant[team] if children else 1.0
                if not children:
                    out[team] = share
                    return
                if own > 0 and denom > 0:
                    out[team] = share * own / denom
                total = max(total, self.grant[team])
            for c in children:
                walk(c, share * (self.grant[c] / total if total > 0 else 1.0 / len(children)))

        walk(None, 1.0)
        return out


_TEAM_RE = re.compile(r"^[^/\s]+(/[^/\s]+)*$")


def load_budgets(path: str) -> Budgets:
    """Read a ``team,gpu_hours`` CSV; check every row and that each parent holds at least its children's sum."""
    grant: dict[str, float] = {}
    lines: dict[str, int] = {}
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = _rows(path, fh)
        header = next(reader, None)
        if header is None:
            raise TraceError(path, 1, "header", "empty file; expected the header team,gpu_hours")
        header = [h.strip() for h in header]
        for col in ("team", "gpu_hours"):
            if col not in header:
                raise TraceError(path, 1, col, f"missing column (header is {','.join(header)})")
        it, ig = header.index("team"), header.index("gpu_hours")
        for lineno, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            team = row[it].strip() if it < len(row) else ""
            if not _TEAM_RE.match(team):
                raise TraceError(path, lineno, "team", f"bad team path {team!r} (use a/b/c)")
            raw = row[ig].strip() if ig < len(row) else ""
            hours = _float(path, lineno, "gpu_hours", raw)
            if not math.isfinite(hours) or hours < 0:
                raise TraceError(path, lineno, "gpu_hours", f"must be a finite number >= 0, got {raw!r}")
            if hours > MAX_GPU_HOURS:
                raise TraceError(path, lineno, "gpu_hours", f"{raw!r} is more than the {MAX_GPU_HOURS:,.0f} GPU-hours "
                                                            "a budget may hold (a typo?)")
            if team in grant:
                raise TraceError(path, lineno, "team", f"{team!r} listed twice (first on line {lines[team]})")
            grant[team] = hours
            lines[team] = lineno
    if not grant:
        raise TraceError(path, 1, "team", "no teams")
    parent: dict[str, str | None] = {}
    for team in list(grant):
        parts = team.split("/")
        for depth in range(1, len(parts) + 1):
            t = "/".join(parts[:depth])
            parent[t] = "/".join(parts[: depth - 1]) or None
    implied = sorted((t for t in parent if t not in grant), key=lambda t: -t.count("/"))
    children: dict[str, list[str]] = {}
    for t, p in parent.items():
        if p is not None:
            children.setdefault(p, []).append(t)
    for t in implied:  # deepest first, so a grandparent sees its implied child's sum
        grant[t] = sum(grant[c] for c in children.get(t, []))
    for t in sorted(grant):
        if t in lines and children.get(t):
            total = sum(grant[c] for c in children[t])
            if total - grant[t] > 1e-9 * max(1.0, total):  # (a sum of decimals may be off in its last bits)
                raise TraceError(
                    path, lines[t], "gpu_hours",
                    f"{t!r} has {grant[t]:.12g} GPU-hours but its children are granted {total:.12g} "
                    f"({total - grant[t]:.6g} more)",
                )
    return Budgets(grant=grant, parent=parent, path=str(path))


# ---- nodes -------------------------------------------------------------------------------------------------

_NODE_RE = re.compile(r"^\s*(\d+)\s*x\s*(\d+)\s*(?::\s*([A-Za-z0-9_.-]+)\s*)?$")
DEFAULT_GPU_TYPE = "GPU"  # a group given without a type (``16x8``): one generic type, price factor 1


def parse_nodes(spec: str) -> tuple[NodeState, ...]:
    """``16x8:H100,4x8:B200`` -> 16 nodes of 8 H100 and 4 of 8 B200 (ids ``h100-000``...); ``16x2,12x8`` -> nodes
    of the generic type ``GPU`` (ids ``gpu-000``...). The simulator marks the debug pool
    (``SimConfig.debug_pool_nodes``)."""
    nodes: list[NodeState] = []
    seen: dict[str, int] = {}
    for part in spec.split(","):
        m = _NODE_RE.match(part)
        if not m:
            raise ValueError(f"--nodes: bad group {part.strip()!r} (expected COUNTxGPUS[:TYPE], e.g. 16x8:H100)")
        count, gpus, gtype = int(m.group(1)), int(m.group(2)), m.group(3) or DEFAULT_GPU_TYPE
        if count < 1 or gpus < 1:
            raise ValueError(f"--nodes: {part.strip()!r} needs at least one node of at least one GPU")
        prefix = gtype.lower()
        start = seen.get(prefix, 0)
        for i in range(start, start + count):
            nodes.append(NodeState(id=f"{prefix}-{i:03d}", gpu_type=gtype, gpus=gpus))
        seen[prefix] = start + count
    return tuple(nodes)


# ---- traces ------------------------------------------------------------------------------------------------

KINDS = ("train", "debug", "eval")


def _check_team(path: str, lineno: int, team: str, known: set[str] | None) -> None:
    if not _TEAM_RE.match(team):
        raise TraceError(path, lineno, "team", f"bad team path {team!r}")
    if known is not None and team not in known:
        raise TraceError(path, lineno, "team", f"unknown team {team!r} (not in the budget file)")


def _float(path: str, lineno: int, field: str, raw: str) -> float:
    """``raw`` as a float, or a TraceError naming the file, line and field."""
    try:
        return float(raw)
    except ValueError:
        raise TraceError(path, lineno, field, f"not a number: {raw!r}") from None


def _duration(path: str, lineno: int, field: str, raw: str) -> float:
    """``raw`` as a run time in seconds, > 0 and at most MAX_DURATION_S, or a TraceError naming the file, line and
    field."""
    duration = _float(path, lineno, field, raw)
    if not math.isfinite(duration) or duration <= 0:
        raise TraceError(path, lineno, field, f"must be > 0, got {raw!r}")
    if duration > MAX_DURATION_S:
        raise TraceError(path, lineno, field, f"{raw} s is more than 100 years: not a run time in seconds")
    return duration


_WHOLE_RE = re.compile(r"^\+?(\d+)(?:\.0*)?$")


def _whole(path: str, lineno: int, field: str, raw: str) -> int:
    """``raw`` as a whole number >= 1 (``8`` or ``8.0``, as spreadsheet and pandas exports write it), or a
    TraceError naming the file, line and field."""
    m = _WHOLE_RE.match(raw)
    if not m:
        raise TraceError(path, lineno, field, f"not a whole number: {raw!r}")
    if int(m.group(1)) < 1:
        raise TraceError(path, lineno, field, f"must be >= 1, got {raw!r}")
    return int(m.group(1))


def _rows(path: str, fh) -> Iterator[list[str]]:
    """The CSV rows of ``fh``; text that is not UTF-8, or that the csv module cannot split, stops with a TraceError
    naming the line instead of a traceback."""
    reader = csv.reader(fh)
    line = 0
    try:
        for row in reader:
            if any("\n" in c or "\r" in c for c in row):  # our formats have no multi-line fields
                raise TraceError(path, line + 1, "csv", "a quote (\") opened on this line is never closed")
            line = reader.line_num
            yield row
    except UnicodeDecodeError:
        raise TraceError(path, _bad_byte_line(path) or line + 1, "encoding",
                         "not UTF-8 text: save the file as UTF-8 (CSV UTF-8)") from None
    except csv.Error as exc:
        raise TraceError(path, line + 1, "csv", str(exc)) from None


def _bad_byte_line(path: str) -> int | None:
    """The line of the file's first byte that is not UTF-8 (None if it cannot be told). Python decodes a text file
    in blocks, so the line the csv reader had reached when decoding failed can be a whole block early: the raw
    bytes say where the byte is. Line breaks are counted as the csv reader counts them (LF, CRLF or CR)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        raw.decode("utf-8")
    except OSError:
        return None
    except UnicodeDecodeError as exc:
        head = raw[:exc.start]
        return head.count(b"\n") + head.count(b"\r") - head.count(b"\r\n") + 1
    return None


def _read_header(path: str, reader, required: tuple[str, ...]) -> tuple[list[str], dict[str, int]]:
    """The header row (stripped) and column positions; a TraceError naming the first missing column."""
    header = next(reader, None)
    if header is None:
        raise TraceError(path, 1, "header", "empty file; a header row is required")
    header = [h.strip() for h in header]
    col = {h: i for i, h in enumerate(header)}
    for name in required:
        if name not in col:
            raise TraceError(path, 1, name, f"missing column (header is {','.join(header)})")
    return header, col


def load_trace(
    path: str,
    teams: Iterable[str] | None = None,
    start_s: float = 0.0,
    days: float | None = None,
    warn: Callable[[str], None] | None = None,
) -> list[TraceJob]:
    """Read a normalized trace (traces/README.md); keep jobs submitted in ``[start_s, start_s + days)``.

    Times are shifted so that ``start_s`` is 0. Returned sorted by (submit_s, line). Every row is validated,
    also those outside the window, so a bad file fails the same way whatever the window. ``warn`` gets what is
    read with a doubt (a ``priority`` column this project cannot use).
    """
    known = set(teams) if teams is not None else None
    end_s = start_s + days * DAY_S if days is not None else math.inf
    jobs: list[TraceJob] = []
    ids: dict[str, int] = {}
    odd_priority: tuple[int, str] | None = None  # the first (line, value) of a priority other than high/low
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = _rows(path, fh)
        header, col = _read_header(path, reader, ("submit_s", "team", "gpus", "duration_s"))
        width = len(header)

        for lineno, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) < width:
                row = row + [""] * (width - len(row))

            def get(name: str) -> str:
                i = col.get(name)
                return row[i].strip() if i is not None else ""

            raw = get("submit_s")
            submit = _float(path, lineno, "submit_s", raw)
            if not math.isfinite(submit) or submit < 0:
                raise TraceError(path, lineno, "submit_s", f"must be a number >= 0, got {raw!r}")
            team = get("team")
            _check_team(path, lineno, team, known)
            gpus = _whole(path, lineno, "gpus", get("gpus"))
            duration = _duration(path, lineno, "duration_s", get("duration_s"))
            kind = get("kind").lower() or "train"
            if kind not in KINDS:
                raise TraceError(path, lineno, "kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")
            raw = get("utilization")
            util = None
            if raw:
                util = _float(path, lineno, "utilization", raw)
                if not 0.0 <= util <= 1.0:
                    raise TraceError(path, lineno, "utilization", f"must be within 0..1, got {raw!r}")
            raw = get("time_limit_s")
            limit = None
            if raw:
                limit = _float(path, lineno, "time_limit_s", raw)
                if not math.isfinite(limit) or limit <= 0:
                    raise TraceError(path, lineno, "time_limit_s", f"must be > 0 (or empty: none), got {raw!r}")
            prio = get("priority").lower() or None
            if prio is not None and prio not in ("high", "low") and odd_priority is None:
                odd_priority = (lineno, get("priority"))
            job_id = get("job_id")  # empty: generated once every id of the file is known
            if job_id in ids:
                raise TraceError(path, lineno, "job_id", f"duplicate id {job_id!r} (first on line {ids[job_id]})")
            if job_id:
                ids[job_id] = lineno
            if start_s <= submit < end_s:
                jobs.append(
                    TraceJob(
                        id=job_id, submit_s=submit - start_s, team=team, gpus=gpus, duration_s=duration,
                        user=get("user"), gpu_type=get("gpu_type") or None, kind=kind, utilization=util,
                        priority=prio, time_limit_s=limit, line=lineno,
                    )
                )
    jobs = _generated_ids(jobs, set(ids))
    if odd_priority is not None:
        jobs = _without_priorities(path, jobs, odd_priority, warn)
    jobs.sort(key=lambda j: (j.submit_s, j.line))
    return jobs


def _generated_ids(jobs: list[TraceJob], taken: set[str]) -> list[TraceJob]:
    """Ids for the rows that gave none: ``L<line>``, or ``L<line>~1``... where the file itself uses that id (on
    any row, before or after)."""
    return [j if j.id else replace(j, id=unique_id(f"L{j.line}", taken)) for j in jobs]


def unique_id(base: str, taken: set[str]) -> str:
    """``base``, or ``base~1``, ``base~2``... where ``taken`` holds it already; the id returned joins ``taken``.
    Every id the simulator makes up (rows without one, generated sessions and squatters) comes from here."""
    job_id, n = base, 0
    while job_id in taken:
        n += 1
        job_id = f"{base}~{n}"
    taken.add(job_id)
    return job_id


def _without_priorities(path: str, jobs: list[TraceJob], odd: tuple[int, str],
                        warn: Callable[[str], None] | None) -> list[TraceJob]:
    """The jobs with no priority level. Extra columns are ignored (traces/README.md) and ``priority`` is only this
    project's extension: a column that holds something else (a number, another scheduler's classes) is another
    tool's, not a reason to refuse the trace; the static-priority baseline then runs every job as HIGH."""
    if warn is not None:
        line, value = odd
        warn(f"warning: {path}:{line}: priority: {value!r} is not high or low; the priority column is ignored "
             "(static-priority runs every job as HIGH)")
    return [replace(j, priority=None) for j in jobs]


PHILLY_PREFIX = "philly/"


_ISO_SECONDS = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")  # the form whose string order is time order


def _naive_utc(ts: datetime) -> datetime:
    """A timestamp with a UTC offset as naive UTC; a naive one as it is (Philly's have none)."""
    return ts.astimezone(timezone.utc).replace(tzinfo=None) if ts.tzinfo is not None else ts


def _parse_date(value: str) -> datetime:
    try:
        return _naive_utc(datetime.fromisoformat(value.strip()))
    except ValueError:
        raise ValueError(f"--start: not a date: {value!r} (use YYYY-MM-DD or YYYY-MM-DD HH:MM:SS)") from None


def load_philly(
    path: str,
    teams: Iterable[str] | None = None,
    start: str | None = None,
    days: float | None = None,
    team_prefix: str = PHILLY_PREFIX,
) -> list[TraceJob]:
    """Read the Philly per-job CSV (timestamp,duration,num_gpus,gpu_time,cluster) into :class:`TraceJob`.

    The window starts at the first job submitted at or after ``start`` (default: the first job of the file) and
    lasts ``days``; ``submit_s`` counts from that first job. The team is ``philly/<vc>``. Only rows inside the
    window are validated (the file is 53k rows, already checked upstream; a bad row inside the window still
    stops with its line and field).
    """
    known = set(teams) if teams is not None else None
    t_start = _parse_date(start) if start else None
    jobs: list[TraceJob] = []
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = _rows(path, fh)
        header, col = _read_header(path, reader, ("timestamp", "duration", "num_gpus", "cluster"))
        its, idu, ing, icl = col["timestamp"], col["duration"], col["num_gpus"], col["cluster"]
        first: datetime | None = None
        end: datetime | None = None
        start_key = t_start.strftime("%Y-%m-%d %H:%M:%S") if t_start else None
        for lineno, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            ts_raw = row[its].strip() if its < len(row) else ""
            if start_key is not None and ts_raw < start_key and _ISO_SECONDS.match(ts_raw):
                continue  # before the window (the file is sorted by timestamp; plain string order is enough)
            try:
                ts = _naive_utc(datetime.fromisoformat(ts_raw))
            except ValueError:
                raise TraceError(path, lineno, "timestamp", f"not a timestamp: {ts_raw!r} (use YYYY-MM-DD "
                                                            "HH:MM:SS)") from None
            if t_start is not None and ts < t_start:
                continue
            if first is None:
                first = ts
                end = first + timedelta(days=days) if days is not None else None
            if end is not None and ts >= end:
                break
            if ts < first:
                raise TraceError(path, lineno, "timestamp", "file is not sorted by timestamp")
            duration = _duration(path, lineno, "duration", row[idu].strip() if idu < len(row) else "")
            gpus = _whole(path, lineno, "num_gpus", row[ing].strip() if ing < len(row) else "")
            vc = row[icl].strip() if icl < len(row) else ""
            team = f"{team_prefix}{vc}"
            if not vc:
                raise TraceError(path, lineno, "cluster", "empty virtual cluster")
            if known is not None and team not in known:
                raise TraceError(path, lineno, "cluster", f"unknown team {team!r} (not in the budget file)")
            jobs.append(
                TraceJob(
                    id=f"P{lineno}", submit_s=(ts - first).total_seconds(), team=team, gpus=gpus,
                    duration_s=duration, line=lineno,
                )
            )
    return jobs
