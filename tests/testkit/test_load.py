"""testkit.load's check of a load's figures (LoadResult.problems) on figures made up here: no
broker, no bridge. The cluster test runs it on real ones (tests/cluster/test_load_while_failing.py)."""

from __future__ import annotations

from testkit.load import LoadResult


def usage(rss_mb: float, fds: int = 15, tasks: int = 1, connections: int = 0, log_errors: int = 0) -> dict:
    return {"rss_mb": rss_mb, "fds": fds, "tasks": tasks, "connections": connections, "log_errors": log_errors}


def load(first_rss: float, last_rss: float, **last) -> LoadResult:
    """One bridge, two rounds: 46 MB before, ``first_rss`` after round 1, ``last_rss`` after round 2."""
    peak = usage(70.0, fds=1000, tasks=1000, connections=1000)
    return LoadResult(before=[usage(46.0)], peak=[[peak], [peak]],
                      after=[[usage(first_rss)], [usage(last_rss, **last)]])


def test_rss_that_levels_off_within_the_slack_passes():
    assert load(62.0, 66.9).problems() == []
    assert load(62.0, 72.0).problems() == []  # 10 MB: the bound itself


def test_rss_above_the_slack_after_the_last_round_is_a_problem():
    assert load(62.0, 72.1).problems() == ["bridge 1: RSS 72.1 MB after round 2, above 72.0 MB (62.0 MB after round 1)"]


def test_above_100_mb_the_slack_is_ten_percent():
    assert load(150.0, 165.0).problems() == []
    assert load(150.0, 165.1).problems() != []


def test_a_tiny_bound_fails_what_the_default_one_passes():
    assert load(62.0, 62.5).problems() == []
    assert load(62.0, 62.5).problems(rss_slack_mb=0.1, rss_slack=0) != []


def test_kept_descriptors_tasks_connections_and_errors_are_problems():
    kept = "bridge 1 after round 2: kept"
    assert load(62.0, 62.0, fds=16).problems() == [f"{kept} {{'fds': '15 -> 16'}}; connections still open: 0"]
    assert load(62.0, 62.0, tasks=2).problems() == [f"{kept} {{'tasks': '1 -> 2'}}; connections still open: 0"]
    assert load(62.0, 62.0, connections=1).problems() == [f"{kept} no descriptor or task; connections still open: 1"]
    assert load(62.0, 62.0, log_errors=1).problems() == ["bridge 1 logged 1 records at ERROR"]


def test_a_lost_message_is_a_problem():
    result = load(62.0, 62.0)
    result.lost = 3
    assert result.problems() == ["3 receipted messages never delivered"]


def test_resources_read_before_peak_after():
    row = load(62.0, 62.4).resources()[0]
    assert row == {"bridge": 1, "rss_mb": "46.0 / 70.0, 70.0 / 62.0, 62.4", "fds": "15 / 1000, 1000 / 15, 15",
                   "tasks": "1 / 1000, 1000 / 1, 1", "connections": 1000, "log_errors": 0}
