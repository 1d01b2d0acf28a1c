"""The repository's pytest entry: the fixtures every suite shares (``broker``, ``rabbit``, ``unique``
from testkit/fixtures.py), one instance per session for tests/ and reliability/tests/ alike."""

pytest_plugins = ["testkit.fixtures"]
