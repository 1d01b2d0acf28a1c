"""Percentiles of measured samples: the one definition behind every p50/p90/p99 that tests/,
bench/ and reliability/ print.

Linear interpolation between the two closest ranks (Hyndman and Fan's type 7: numpy's and R's
default, ``statistics.quantiles(method="inclusive")``): p50 is the median, p0 the minimum, p100
the maximum, and a percentile never lies outside the samples. bench's ping-pong round trips
were always computed so (the numbers in docs/performance.md); the idle connections' heart-beat
lateness, the reliability probe's p99, the login benchmark's p99 and the cluster scenarios'
p99 used nearest-rank variants before, which differ from this by less than one rank: one
sample's worth of the distribution (0.1 % of it at 1,000 samples), and for fewer than 100
samples a p99 that is no longer simply the maximum.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], p: float, *, default: float | None = None) -> float:
    """The ``p``-th percentile (0-100) of ``values``, in any order. With no values: ``default``,
    or ``ValueError`` when there is none (a run that measured nothing should say so)."""
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} is not between 0 and 100")
    ordered = sorted(values)
    if not ordered:
        if default is None:
            raise ValueError("percentile of no values")
        return default
    rank = (len(ordered) - 1) * p / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
