"""Add a ``time_limit_s`` column to a normalized trace: run-time limits as users give them at submission.

Real traces rarely keep the limits users gave, so this draws them from the trace's own run times with the model
that studies of Slurm and PBS logs describe (Tsafrir, Etsion and Feitelson, "Modeling user runtime estimates",
2005): users overestimate, and they pick round values. A job's limit is the smallest of ``ROUND_LIMITS_S`` at
or above its run time times a factor drawn log-uniformly from 1 to ``--overestimate`` (default 5); a share of the
jobs (``--none``, default 0.2) gives no limit. No job runs past its limit, so a replay delivers the same work
with and without the column. Seeded, so the same arguments write the same file.

    python docs/examples/philly_typed.py --start 2017-10-01 --days 14 --typed 0 \\
        --trace /tmp/p.csv --budgets /tmp/p-budgets.csv
    python docs/examples/time_limits.py /tmp/p.csv /tmp/p-limits.csv
    python -m scheduling.simulation --trace /tmp/p-limits.csv --budgets /tmp/p-budgets.csv --nodes 16x8:H100 \\
        --days 14 --policy all
"""

from __future__ import annotations

import argparse
import bisect
import csv
import math
import random

MINUTE, HOUR, DAY = 60, 3600, 86400
ROUND_LIMITS_S = (
    15 * MINUTE, 30 * MINUTE, HOUR, 2 * HOUR, 4 * HOUR, 8 * HOUR, 12 * HOUR, DAY, 2 * DAY, 3 * DAY, 7 * DAY,
    14 * DAY, 30 * DAY, 60 * DAY,
)


def time_limit(duration_s: float, rng: random.Random, overestimate: float, none_share: float) -> float | None:
    """The limit a user gives a job that will run ``duration_s`` seconds (None: no limit given)."""
    if rng.random() < none_share:
        return None
    guess = duration_s * math.exp(rng.uniform(0.0, math.log(overestimate)))
    i = bisect.bisect_left(ROUND_LIMITS_S, guess)
    return float(ROUND_LIMITS_S[i]) if i < len(ROUND_LIMITS_S) else math.ceil(guess / DAY) * float(DAY)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", help="normalized trace to read")
    p.add_argument("out", help="normalized trace to write, with a time_limit_s column")
    p.add_argument("--overestimate", type=float, default=5.0, help="largest factor over the run time, default 5")
    p.add_argument("--none", type=float, default=0.2, help="share of jobs with no limit, default 0.2")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    if a.overestimate < 1:
        p.error("--overestimate must be >= 1 (a limit below the run time would stop the job)")
    if not 0 <= a.none <= 1:
        p.error("--none must be within 0..1")
    rng = random.Random(a.seed)
    with open(a.trace, newline="", encoding="utf-8-sig") as src, open(a.out, "w", newline="") as dst:
        reader = csv.DictReader(src)
        fields = [f for f in reader.fieldnames or [] if f != "time_limit_s"] + ["time_limit_s"]
        writer = csv.DictWriter(dst, fieldnames=fields)
        writer.writeheader()
        for row in reader:
            limit = time_limit(float(row["duration_s"]), rng, a.overestimate, a.none)
            row["time_limit_s"] = "" if limit is None else f"{limit:.0f}"
            writer.writerow(row)


if __name__ == "__main__":
    main()
