"""Every command line the documentation prints runs as printed, or is listed here with the
reason it cannot run in a test.

The command lines come from the shell blocks (```sh, bash, shell, console) of README.md, the
chart's README and every page of docs/: continuation lines joined, comments cut, ``a && b``
taken part by part. Each part is:

- a ``stomp-bridge`` command that ends by itself (``--help``, ``config show``, ``manifest …``):
  run in a scratch directory holding the documentation's titled files (a block opened with
  ```toml title="bridge.toml"`` is written there as ``bridge.toml``), exit status 0 expected;
- a ``stomp-bridge`` command that runs the bridge: started against the suite's RabbitMQ, it must
  log its ``listening`` line and take a STOMP CONNECT, then SIGTERM must end it with status 0.
  Listener ports are the one deliberate change: each port a flag names becomes a free one, and
  the WebSocket and HTTP listeners get free ports, so that the run collides with nothing;
- ``helm install``: rendered with ``helm template`` and the same arguments (no cluster here);
- ``rabbitmq-plugins enable <plugin>``: run as printed (against the machine's own RabbitMQ node,
  as a reader's would be), the plugin checked enabled, and disabled again if it was not before;
- anything else must match an entry of :data:`ALLOWED`, which says why it is not run. A new
  command in the docs fails :func:`test_every_documented_command_is_run_or_allowed` until it is
  run here or listed, and an entry that no longer matches anything fails
  :func:`test_every_allowed_entry_is_still_documented`.
"""

from __future__ import annotations

import os
import re
import selectors
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from stomp_bridge.cli import parse as parse_cli
from testkit.ports import free_port

from .support import ROOT, helm_binary

SHELLS = ("sh", "bash", "shell", "console")
BLOCK = re.compile(r"(?ms)^```(\w+)([^\n]*)\n(.*?)^```")
TITLE = re.compile(r'title="([^"]+)"')
ENV_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")
PORT_FLAG = re.compile(r"(--(?:port|tls-port|ws-port|http-port)[ =])(\d+)")
PLUGIN_ENABLE = re.compile(r"rabbitmq-plugins enable (rabbitmq_\w+)")

# (pattern over one command, comments cut; why it is not run here)
ALLOWED: list[tuple[str, str]] = [
    (r"python3 -m venv \.venv",
     "the first half of 'Run it': makes .venv, as scripts/ensure-venv does before every test run; "
     "the stomp-bridge part of the same line is run"),
    (r"\.venv/bin/pip install -q -e \.",
     "installs this checkout into .venv, as scripts/ensure-venv does (with the test extras)"),
    (r"(STOMP_BRIDGE_TEST_TARGET=native )?bash scripts/test( .*)?",
     "the test suite itself, of which this test is a part (CI: .ci/run)"),
    (r"bash scripts/test-brokers( .*)?", "the differential matrix; CI runs it with scripts/test as one of its runs (.ci/run)"),
    (r"docker (build|run|compose) .*",
     "no Docker here: tests/deploy replays the Dockerfile's build stage, runs the installed entry "
     "point and its HEALTHCHECK, and validates docker-compose.yml with docker-compose config"),
    (r"kubectl .*", "needs a Kubernetes cluster; tests/deploy validates the rendered chart against Kubernetes' schemas"),
    (r"\.venv/bin/python -m bench(\.tracing)? .*",
     "a benchmark: minutes of load whose figures go in notes, never in assertions; "
     "tests/integration/test_bench.py runs a short one end to end"),
    (r"\.venv/bin/python -m reliability(\.hard_errors)? .*",
     "the reliability harness runs for minutes to hours, hard_errors a minute against each broker; "
     "reliability/tests runs a short version of each part"),
    (r"pip install 'stomp-bridge\[spark\]'",
     "installs from a package index; scripts/ensure-venv installs the spark extra from this checkout"),
    (r"python examples/spark/(bulk_load|windowed_aggregation)\.py .*",
     "needs Spark with Java and input data; tests/spark runs the data source in a local[2] Spark"),
    (r"zip -qr /tmp/stomp_bridge\.zip stomp_bridge", "the first step of the spark-submit recipe, which needs a Spark cluster"),
    (r"spark-submit .*", "needs a Spark cluster"),
    (r"(STOMP_BRIDGE_\w+=\S+ )+stomp-bridge forward",
     "needs a peer node (its manifest, a certificate it trusts); tests/integration/test_forwarder.py "
     "runs the forwarder against a bridge"),
    (r"rabbitmq-plugins enable rabbitmq_auth_mechanism_ssl",
     "changes a RabbitMQ node; the certificate-login tests enable EXTERNAL on the test broker and restore it"),
    (r"npm ci", "scripts/ensure-js runs it before the browser tests"),
    (r"\.venv/bin/mkdocs build --strict",
     "would write site/ into the checkout; tests/unit/test_docs_site.py runs the same build into a scratch directory"),
    (r"\.venv/bin/python scripts/docs-tables\.py",
     "rewrites docs/ in the checkout; tests/unit/test_docs_tables.py runs its check (the tables are what it writes)"),
    (r"python3 -m http\.server 8000",
     "serves the checkout until stopped; tests/e2e serves examples/web over HTTP the same way for Chromium"),
]


@dataclass(frozen=True)
class Command:
    file: str  # relative to the repository
    line: int  # where its block starts
    text: str  # one part of a command line, as printed (continuations joined, comment cut)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.text}"


def doc_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "helm" / "stomp-bridge" / "README.md",
            *sorted((ROOT / "docs").rglob("*.md"))]


def _cut_comment(line: str) -> str:
    """The line without a trailing ``# comment`` (a # inside quotes or a word stays)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def commands_in(text: str, file: str) -> list[Command]:
    out = []
    for block in BLOCK.finditer(text):
        if block.group(1) not in SHELLS:
            continue
        line_no = text[: block.start()].count("\n") + 1
        joined = re.sub(r"\\\n\s*", " ", block.group(3))
        for line in joined.splitlines():
            line = _cut_comment(line.strip())
            if not line:
                continue
            for part in line.split(" && "):
                out.append(Command(file, line_no, " ".join(part.split())))
    return out


def documented_commands() -> list[Command]:
    return [c for path in doc_files() for c in commands_in(path.read_text(), str(path.relative_to(ROOT)))]


def documented_files() -> dict[str, str]:
    """The documentation's titled blocks (```toml title="bridge.toml"``), by title."""
    found: dict[str, str] = {}
    for path in doc_files():
        for block in BLOCK.finditer(path.read_text()):
            title = TITLE.search(block.group(2))
            if title:
                name = title.group(1)
                assert name not in found or found[name] == block.group(3), f"two different {name} in the docs"
                found[name] = block.group(3)
    return found


# -- what each command is -------------------------------------------------------------------


def _words(text: str) -> tuple[list[str], list[str]]:
    """(environment assignments, the command's words)."""
    words = shlex.split(text)
    env = []
    while words and ENV_ASSIGNMENT.match(words[0]):
        env.append(words.pop(0))
    return env, words


def kind(command: Command) -> str:
    """``oneshot``, ``server``, ``helm``, ``plugin``, ``allowed`` or ``unknown``."""
    for pattern, _ in ALLOWED:
        if re.fullmatch(pattern, command.text):
            return "allowed"
    if PLUGIN_ENABLE.fullmatch(command.text):
        return "plugin"
    _, words = _words(command.text)
    if not words:
        return "unknown"
    program, args = words[0], words[1:]
    if program in ("stomp-bridge", ".venv/bin/stomp-bridge"):
        if args[:1] == ["manifest"] or {"-h", "--help", "--version"} & set(args):
            return "oneshot"
        try:
            subcommand, _ = parse_cli(args)
        except SystemExit:
            return "oneshot"  # a usage error: running it shows the failure
        if subcommand in (["config", "show"], ["config", "reference"]):
            return "oneshot"
        if subcommand == []:
            return "server"
        return "unknown"  # forward: runs until stopped and needs a peer; allow it or run it
    if program == "helm" and args[:1] == ["install"]:
        return "helm"
    return "unknown"


COMMANDS = documented_commands()


def _of(*kinds: str) -> list:
    return [pytest.param(c, id=f"{c.file}:{c.line}:{c.text[:60]}") for c in COMMANDS if kind(c) in kinds]


# -- how they run ---------------------------------------------------------------------------


def _environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This interpreter's bin first on PATH, this checkout first on PYTHONPATH (the stomp-bridge
    script of another checkout's venv then runs this code), no STOMP_BRIDGE_* settings leaking
    in from the test run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOMP_BRIDGE_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra or {})
    return env


@pytest.fixture
def scratch(tmp_path) -> Path:
    """A directory as a reader's would be: the documented files, and .venv/bin/stomp-bridge."""
    for name, content in documented_files().items():
        (tmp_path / name).write_text(content)
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parent.parent)
    return tmp_path


def run_oneshot(command: Command, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command.text], cwd=cwd, env=_environment(),
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("command", _of("oneshot"))
def test_documented_stomp_bridge_command_succeeds(command, scratch):
    for earlier in COMMANDS:  # the commands before it on its page ran first (manifest write, validate)
        if earlier == command:
            break
        if earlier.file == command.file and kind(earlier) == "oneshot":
            run_oneshot(earlier, scratch)
    done = run_oneshot(command, scratch)
    assert done.returncode == 0, f"{command}\nexit {done.returncode}\n{done.stdout}{done.stderr}"


class Bridge:
    """A documented command that runs the bridge, started with free listener ports."""

    def __init__(self, command: Command, cwd: Path, amqp_url: str):
        self.text = PORT_FLAG.sub(lambda m: m.group(1) + str(free_port()), command.text)
        env = _environment({
            "STOMP_BRIDGE_AMQP_URL": amqp_url,
            "STOMP_BRIDGE_PORT": str(free_port()),  # for a port from a --config file
            "STOMP_BRIDGE_WS_PORT": "0",
            "STOMP_BRIDGE_HTTP_PORT": "0",
        })
        self.proc = subprocess.Popen(["bash", "-c", self.text], cwd=cwd, env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.output: list[str] = []

    def wait_listening(self, timeout: float = 30.0) -> int:
        """The STOMP port from the ``listening`` line."""
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if not sel.select(timeout=0.5):
                    continue
                line = self.proc.stdout.readline()
                if not line:
                    break
                self.output.append(line)
                if "stomp-bridge listening" in line:
                    return int(re.search(r'\bport"?[=:] ?(\d+)', line).group(1))  # text or json lines
        raise AssertionError(f"{self.text}: no 'listening' line within {timeout} s:\n{''.join(self.output)}")

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            rest, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            rest, _ = self.proc.communicate()
        self.output.append(rest or "")
        return self.proc.returncode


def stomp_connect(port: int, login: str, passcode: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        sock.sendall(f"CONNECT\naccept-version:1.2\nhost:/\nlogin:{login}\npasscode:{passcode}\n\n\0".encode())
        reply = b""
        while b"\0" not in reply:
            chunk = sock.recv(4096)
            if not chunk:
                break
            reply += chunk
        sock.sendall(b"DISCONNECT\n\n\0")
    return reply


@pytest.mark.integration
@pytest.mark.parametrize("command", _of("server"))
def test_documented_bridge_command_listens_and_stops(command, scratch, broker):
    bridge = Bridge(command, scratch, broker.amqp_url)
    try:
        port = bridge.wait_listening()
        reply = stomp_connect(port, broker.user, broker.password)
        assert reply.startswith(b"CONNECTED\n"), f"{bridge.text}: CONNECT got {reply!r}"
    finally:
        status = bridge.stop()
    assert status == 0, f"{bridge.text}: exit {status} after SIGTERM:\n{''.join(bridge.output)}"


@pytest.mark.integration
def test_first_client_example_runs_against_the_run_it_bridge(scratch, broker):
    page = (ROOT / "docs" / "getting-started.md").read_text()
    run_it = next(c for c in commands_in(page, "docs/getting-started.md") if kind(c) == "server")
    section = page[page.index("## A first client"):page.index("## Test it")]
    (example,) = re.findall(r"```python\n(.*?)```", section, re.S)
    bridge = Bridge(run_it, scratch, broker.amqp_url)
    try:
        port = bridge.wait_listening()
        assert '("127.0.0.1", 61623)' in example
        script = example.replace('("127.0.0.1", 61623)', f'("127.0.0.1", {port})')
        script = script.replace('conn.connect("guest", "guest"', f'conn.connect({broker.user!r}, {broker.password!r}')
        done = subprocess.run([sys.executable, "-c", script], cwd=scratch, env=_environment(),
                              capture_output=True, text=True, timeout=60)
    finally:
        bridge.stop()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['hello, RabbitMQ']", done.stdout + done.stderr


@pytest.mark.parametrize("command", _of("helm"))
def test_documented_helm_install_renders(command):
    _, words = _words(command.text)
    done = subprocess.run([helm_binary(), "template", *words[2:]], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, f"{command}\n(as helm template)\n{done.stdout}{done.stderr}"


@pytest.mark.parametrize("values", [[], ["-f", str(ROOT / "helm/stomp-bridge/ci/websocket-ingress-values.yaml")]],
                         ids=["defaults", "websocket-ingress"])
def test_the_charts_notes_print_a_stomp_bridge_command_that_runs(values, scratch):
    """NOTES.txt prints ``kubectl exec … -- stomp-bridge …``: its stomp-bridge part runs against
    the settings file the chart renders (written where the pod mounts it, in the scratch dir)."""
    args = ["demo", str(ROOT / "helm" / "stomp-bridge"), "--namespace", "messaging", *values]
    notes = subprocess.run([helm_binary(), "install", *args, "--dry-run=client"], capture_output=True,
                           text=True, timeout=120, check=True).stdout.split("NOTES:", 1)[1]
    rendered = subprocess.run([helm_binary(), "template", *args], capture_output=True, text=True,
                              timeout=120, check=True).stdout
    config_map = next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "ConfigMap")
    commands = re.findall(r" -- (stomp-bridge .*)$", notes, re.M)
    assert commands, f"NOTES print no stomp-bridge command:\n{notes}"
    for text in commands:
        paths = re.findall(r"--config (\S+)", text)
        for path in paths:
            local = scratch / Path(path).name
            local.write_text(config_map["data"][Path(path).name])
            text = text.replace(path, str(local))
        done = run_oneshot(Command("helm/stomp-bridge/templates/NOTES.txt", 0, text), scratch)
        assert done.returncode == 0, f"{text}\nexit {done.returncode}\n{done.stdout}{done.stderr}"


def _enabled_plugins() -> list[str]:
    done = subprocess.run(["rabbitmq-plugins", "list", "-E", "-m"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (
        "rabbitmq-plugins cannot reach this machine's RabbitMQ node, which the documented "
        f"rabbitmq-plugins commands address: {done.stderr or done.stdout}")
    return done.stdout.split()


@pytest.mark.integration
@pytest.mark.rabbitmqctl
@pytest.mark.parametrize("command", _of("plugin"))
def test_documented_plugin_command_enables_the_plugin(command):
    plugin = PLUGIN_ENABLE.fullmatch(command.text).group(1)
    before = plugin in _enabled_plugins()
    try:
        done = subprocess.run(["bash", "-c", command.text], env=_environment(), capture_output=True, text=True,
                              timeout=180)
        assert done.returncode == 0, f"{command}\nexit {done.returncode}\n{done.stdout}{done.stderr}"
        assert plugin in _enabled_plugins()
    finally:
        if not before:
            subprocess.run(["rabbitmq-plugins", "disable", plugin], capture_output=True, timeout=180)


# -- the lists stay honest ------------------------------------------------------------------


def test_every_documented_command_is_run_or_allowed():
    unknown = [str(c) for c in COMMANDS if kind(c) == "unknown"]
    assert not unknown, ("documented commands this test neither runs nor allows "
                         "(run them here, or add them to ALLOWED with the reason):\n" + "\n".join(unknown))


def test_every_allowed_entry_is_still_documented():
    unused = [p for p, _ in ALLOWED if not any(re.fullmatch(p, c.text) for c in COMMANDS)]
    assert not unused, f"ALLOWED entries that match no documented command: {unused}"


def test_the_documented_commands_are_found():
    texts = {c.text for c in COMMANDS}
    assert ".venv/bin/stomp-bridge --port 61623" in texts  # README's "Run it", after its &&
    assert "bash scripts/test" in texts
    assert any(kind(c) == "oneshot" for c in COMMANDS) and any(kind(c) == "server" for c in COMMANDS)


def test_a_broken_command_fails(scratch):
    """What the oneshot test would see if the docs misspelt a command or a flag."""
    for text in ("stomp-bridge config shwo", "stomp-bridge --prot 61623 config show",
                 "stomp-bridge --config missing.toml config show"):
        done = run_oneshot(Command("test", 0, text), scratch)
        assert done.returncode != 0, text
    assert kind(Command("test", 0, "stomp-bridge frobnicate")) == "oneshot"  # runs, and fails
    assert kind(Command("test", 0, "curl -s localhost:9410/metrics")) == "unknown"
