"""testkit.stats.percentile: the one percentile behind the p50/p90/p99 that bench/ and
reliability/ print (linear interpolation between the closest ranks, numpy's default)."""

from __future__ import annotations

import random
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from testkit.stats import percentile

samples = st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=300)


def test_interpolates_between_the_closest_ranks():
    values = [4.0, 1.0, 3.0, 2.0]  # any order
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 4.0
    assert percentile(values, 50) == 2.5
    assert percentile(values, 90) == pytest.approx(3.7)  # rank 2.7: 3 + 0.7 * (4 - 3)
    assert percentile([7.0], 99) == 7.0


@given(samples)
def test_the_integer_percentiles_are_statistics_inclusive_quantiles(values):
    if len(values) < 2:
        return
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    for p in (1, 50, 90, 99):
        assert percentile(values, p) == pytest.approx(cuts[p - 1], rel=1e-9, abs=1e-9)


@given(samples)
def test_p50_is_the_median_and_every_percentile_lies_within_the_samples(values):
    assert percentile(values, 50) == pytest.approx(statistics.median(values), rel=1e-9, abs=1e-9)
    points = [percentile(values, p) for p in (0, 10, 50, 90, 99, 99.9, 100)]
    assert points == sorted(points)
    assert min(values) <= points[0] and points[-1] <= max(values)


def test_bench_round_trips_keep_the_numbers_they_printed():
    """bench/scenarios.py's ping-pong p50/p90/p99 were this interpolation before it moved here."""
    def before(sorted_values, p):
        k = (len(sorted_values) - 1) * p / 100
        lo = int(k)
        hi = min(lo + 1, len(sorted_values) - 1)
        return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)

    rng = random.Random(7)
    rtts = sorted(rng.lognormvariate(-1, 0.5) for _ in range(2000))
    for p in (50, 90, 99):
        assert percentile(rtts, p) == before(rtts, p)


def test_the_nearest_rank_variants_it_replaced_differ_by_less_than_one_rank():
    """The idle lateness, probe, login and cluster p99s took a sample near rank n*p before."""
    rng = random.Random(11)
    values = sorted(rng.expovariate(1) for _ in range(1000))
    new = percentile(values, 99)
    for index in (int(len(values) * 0.99), int(len(values) * 0.99) - 1, round(0.99 * len(values)) - 1):
        neighbours = values[max(0, index - 1):index + 2]
        assert min(neighbours) <= new <= max(neighbours)


def test_no_values_is_an_error_unless_a_default_is_given():
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    assert percentile([], 99, default=0.0) == 0.0
    with pytest.raises(ValueError, match="between 0 and 100"):
        percentile([1.0], 101)
