"""The deployment and testing pages of the docs say what the files do."""

from __future__ import annotations

import re

import pytest

from .support import ROOT, env_setting
from .test_docker_files import IMAGE_PORTS

DOCS = ROOT / "docs"


def test_port_table_is_the_images_ports():
    rows = re.findall(r"^\| (\d+) \| `(\w+)` \|", (DOCS / "deployment.md").read_text(), re.M)
    assert {int(port): name for port, name in rows} == IMAGE_PORTS
    for _, name in rows:
        env_setting("STOMP_BRIDGE_" + name.upper())


@pytest.mark.integration
def test_in_process_example_runs(broker):
    page = (DOCS / "testing-your-application.md").read_text()
    (example, *_) = re.findall(r"```python\n(.*?)```", page, re.S)
    example = example.replace("amqp://guest:guest@localhost:5672/", broker.amqp_url)
    namespace: dict = {}
    exec(compile(example, "docs/testing-your-application.md", "exec"), namespace)
    namespace["test_orders_are_published"]()
