"""The ``stomp-bridge`` command."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys

from pydantic import ValidationError

from stomp_bridge import __version__
from stomp_bridge.logs import configure
from stomp_bridge import processes
from stomp_bridge.settings import Settings, UnknownSetting, load, masked, reference

log = logging.getLogger("stomp_bridge")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stomp-bridge",
        description="A STOMP 1.0-1.2 gateway in front of RabbitMQ. Every setting can also come "
        "from an environment variable STOMP_BRIDGE_<NAME> (e.g. STOMP_BRIDGE_PORT) or a TOML/YAML "
        "file (--config); flags win over variables, variables over the file. "
        "`stomp-bridge config show` prints the effective configuration, secrets masked. "
        "Swaptacular: `stomp-bridge manifest write [-o stomp.toml]`, `stomp-bridge manifest validate "
        "FILE`, `stomp-bridge forward` (see docs/swaptacular.md). SIGHUP reloads the TLS certificate.",
    )
    parser.add_argument(
        "--config", help="TOML or YAML settings file (also STOMP_BRIDGE_CONFIG)", default=None
    )
    parser.add_argument("--version", action="version", version=f"stomp-bridge {__version__}")
    parser.add_argument("--host", help="interface to listen on (default 0.0.0.0)")
    parser.add_argument("--port", type=_port_or_none, help="STOMP TCP port (default 61613; none: no plain listener)")
    parser.add_argument("--tls-port", type=_port_or_none, help="STOMP over TLS port (e.g. 61614; needs the tls_* files)")
    parser.add_argument(
        "--http-port", type=_port_or_none,
        help="port of /metrics, /healthz, /readyz (default 9410; 0 picks one; none disables)",
    )
    parser.add_argument(
        "--ws-port", type=_port_or_none,
        help="STOMP over WebSocket port (default 15674, web-stomp's; 0 picks one; none disables)",
    )
    parser.add_argument("--amqp-url", help="RabbitMQ URL (default amqp://guest:guest@localhost:5672/)")
    parser.add_argument("--default-user", help="login used when CONNECT has none (default guest)")
    parser.add_argument("--default-pass", help="passcode used with --default-user")
    parser.add_argument("--default-vhost", help="vhost when CONNECT has no host header (default /)")
    parser.add_argument(
        "--implicit-connect", action="store_true", default=None,
        help="log in as the default user when the first frame is not CONNECT",
    )
    parser.add_argument("--default-topic-exchange", help="exchange behind /topic/ (default amq.topic)")
    parser.add_argument("--max-frame-size", type=int, help="bytes (default 4194304)")
    parser.add_argument(
        "--workers", type=int, help="bridge processes sharing the ports, one core each (default 1)"
    )
    parser.add_argument("--log-level", help="DEBUG, INFO, WARNING, ERROR (default INFO)")
    parser.add_argument("--log-format", choices=["text", "json"], help="log line format")
    parser.add_argument(
        "command", nargs="*", metavar="COMMAND",
        help="config show | config reference | forward (before or after the flags); none runs the bridge",
    )
    return parser


COMMANDS = ([], ["config", "show"], ["config", "reference"], ["forward"])


def _port_or_none(text: str) -> int | str:
    """A port number, or none/off for no listener; the error names the flag's own terms."""
    if text.strip().lower() in ("none", "off"):
        return text
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0-65535) or none")
    return port


def parse(argv: list[str]) -> tuple[list[str], dict[str, object]]:
    """The command words and the settings given as flags, in any order (the Helm chart's
    NOTES print ``stomp-bridge config show --config FILE``, users type it the other way too)."""
    parser = build_parser()
    args = parser.parse_intermixed_args(argv)
    if args.command not in COMMANDS:
        parser.error(
            f"unknown command {' '.join(args.command)!r}; the commands are config show, config reference, "
            "forward and manifest (or none, to run the bridge)"
        )
    overrides = {k: v for k, v in vars(args).items() if v is not None and k not in ("config", "command")}
    if args.config:
        overrides["config"] = args.config
    return args.command, overrides


def load_settings(argv: list[str] | None = None) -> Settings:
    _, overrides = parse(list(argv or []))
    config = overrides.pop("config", None) or os.environ.get("STOMP_BRIDGE_CONFIG")
    return load(config, **overrides)


def _settings_or_exit(argv: list[str]) -> Settings | int:
    try:
        return load_settings(argv)
    except ValidationError as exc:
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"])  # a list entry: name.index
            message = err["msg"].removeprefix("Value error, ")
            if field:
                print(f"stomp-bridge: invalid setting {field}: {message}", file=sys.stderr)
            else:  # a rule across settings (listeners, TLS, certificate login, profile, proxy)
                print(f"stomp-bridge: invalid configuration: {message}", file=sys.stderr)
        return 2
    except UnknownSetting as exc:
        for problem in exc.problems:
            print(f"stomp-bridge: {problem}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"stomp-bridge: {exc}", file=sys.stderr)
        return 2


def _manifest(argv: list[str]) -> int:
    """``manifest write [-o stomp.toml] [settings flags]`` / ``manifest validate FILE``."""
    from stomp_bridge.swaptacular import manifest

    if argv[:1] == ["validate"] and len(argv) == 2:
        try:
            found = manifest.parse(open(argv[1], encoding="utf-8").read())
        except (OSError, manifest.ManifestError) as exc:
            print(f"stomp-bridge: {argv[1]}: invalid manifest: {exc}", file=sys.stderr)
            return 1
        return _output(f"{argv[1]}: valid; servers {', '.join(found.servers)}; host {found.host!r}; "
                       f"destination {found.destination!r}\n")
    if argv[:1] != ["write"]:
        print("usage: stomp-bridge manifest write [-o FILE] [settings flags] | "
              "stomp-bridge manifest validate FILE", file=sys.stderr)
        return 2
    sub = argparse.ArgumentParser(prog="stomp-bridge manifest write", add_help=False)
    sub.add_argument("-o", "--output", default="-")
    args, rest = sub.parse_known_args(argv[1:])
    settings = _settings_or_exit(rest)
    if isinstance(settings, int):
        return settings
    try:
        text = manifest.dumps(manifest.from_settings(settings))
    except manifest.ManifestError as exc:
        print(f"stomp-bridge: {exc}", file=sys.stderr)
        return 2
    if args.output == "-":
        return _output(text)
    else:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(text)
    return 0


async def _forward(settings: Settings) -> None:
    from stomp_bridge.swaptacular.forwarder import Forwarder
    from stomp_bridge.swaptacular.manifest import parse

    if not settings.swpt_peer_manifest:
        raise ValueError("stomp-bridge forward needs swpt_peer_manifest (the peer's stomp.toml)")
    with open(settings.swpt_peer_manifest, encoding="utf-8") as f:
        peer = parse(f.read())
    forwarder = Forwarder(settings, peer)
    await forwarder.run(processes.stop_signal())


def _output(text: str) -> int:
    """``text`` on stdout; 0, also when the reader left early (``config show | head``): a closed
    pipe ends the output, not in a BrokenPipeError traceback."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # what is still buffered would raise again when Python flushes stdout at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["manifest"]:
        return _manifest(argv[1:])
    command, _ = parse(argv)
    if command == ["config", "reference"]:
        return _output(reference())
    forward = command == ["forward"]
    show = command == ["config", "show"]
    settings = _settings_or_exit(argv)
    if isinstance(settings, int):
        return settings
    if show:
        return _output(json.dumps(masked(settings), indent=2, sort_keys=True) + "\n")
    configure(settings.log_level, settings.log_format)
    if forward:
        try:
            asyncio.run(_forward(settings))
        except (OSError, ValueError) as exc:
            print(f"stomp-bridge forward: {exc}", file=sys.stderr)
            return 2
        return 0
    try:
        processes.run(settings)
    except RuntimeError as exc:  # a worker that could not start (its own log lines say why)
        print(f"stomp-bridge: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"stomp-bridge: cannot listen (STOMP {settings.host}:{settings.port}, TLS {settings.tls_port}, "
              f"WebSocket {settings.ws_port}, HTTP {settings.http_host}:{settings.http_port}): "
              f"{exc.strerror or exc}. Choose other ports with --port / --tls-port / --ws-port / --http-port or "
              "STOMP_BRIDGE_PORT / STOMP_BRIDGE_TLS_PORT / STOMP_BRIDGE_WS_PORT / STOMP_BRIDGE_HTTP_PORT "
              "(none turns a listener off).",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
