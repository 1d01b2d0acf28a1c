"""The README's deployment and testing sections say what the files do."""

from __future__ import annotations

import re

import pytest

from .support import ROOT, env_setting
from .test_docker_files import IMAGE_PORTS

README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end]


def test_port_table_is_the_images_ports():
    rows = re.findall(r"^\| (\d+) \| `(\w+)` \|", section("Deployment"), re.M)
    assert {int(port): name for port, name in rows} == IMAGE_PORTS
    for _, name in rows:
        env_setting("STOMP_BRIDGE_" + name.upper())


@pytest.mark.integration
def test_in_process_example_runs(broker):
    (example, *_) = re.findall(r"```python\n(.*?)```", section("Testing your application against the bridge"), re.S)
    example = example.replace("amqp://guest:guest@localhost:5672/", broker.amqp_url)
    namespace: dict = {}
    exec(compile(example, "README.md", "exec"), namespace)
    namespace["test_orders_are_published"]()
