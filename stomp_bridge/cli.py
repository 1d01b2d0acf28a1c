"""The ``stomp-bridge`` command."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys

from pydantic import ValidationError

from . import __version__
from .logs import configure
from .server import BridgeServer
from .settings import Settings, load, masked, reference

log = logging.getLogger("stomp_bridge")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stomp-bridge",
        description="A STOMP 1.0-1.2 gateway in front of RabbitMQ. Every setting can also come "
        "from an environment variable STOMP_BRIDGE_<NAME> (e.g. STOMP_BRIDGE_PORT) or a TOML/YAML "
        "file (--config); flags win over variables, variables over the file. "
        "`stomp-bridge config show` prints the effective configuration, secrets masked.",
    )
    parser.add_argument(
        "--config", help="TOML or YAML settings file (also STOMP_BRIDGE_CONFIG)", default=None
    )
    parser.add_argument("--version", action="version", version=f"stomp-bridge {__version__}")
    parser.add_argument("--host", help="interface to listen on (default 0.0.0.0)")
    parser.add_argument("--port", type=int, help="STOMP TCP port (default 61613)")
    parser.add_argument(
        "--http-port", type=int, help="port of /metrics, /healthz, /readyz (default 9410; 0 picks one)"
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
    parser.add_argument("--log-level", help="DEBUG, INFO, WARNING, ERROR (default INFO)")
    parser.add_argument("--log-format", choices=["text", "json"], help="log line format")
    return parser


def load_settings(argv: list[str] | None = None) -> Settings:
    args = build_parser().parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if v is not None and k != "config"}
    return load(args.config or os.environ.get("STOMP_BRIDGE_CONFIG"), **overrides)


async def _serve(settings: Settings) -> None:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        pass
    server = BridgeServer(settings)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except NotImplementedError:  # pragma: no cover - non-Unix
            pass
    await stop.wait()
    log.info("shutting down", extra={"connections": server.connection_count})
    await server.close()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["config", "reference"]:
        print(reference(), end="")
        return 0
    show = argv[:2] == ["config", "show"]
    if show:
        argv = argv[2:]
    try:
        settings = load_settings(argv)
    except ValidationError as exc:
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"])
            print(f"stomp-bridge: invalid setting {field}: {err['msg']}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"stomp-bridge: {exc}", file=sys.stderr)
        return 2
    if show:
        print(json.dumps(masked(settings), indent=2, sort_keys=True))
        return 0
    configure(settings.log_level, settings.log_format)
    runner = asyncio.run
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:
        pass
    try:
        runner(_serve(settings))
    except OSError as exc:
        print(f"stomp-bridge: cannot listen (STOMP {settings.host}:{settings.port}, HTTP "
              f"{settings.http_host}:{settings.http_port}): {exc.strerror or exc}. Choose other ports "
              "with --port / --http-port or STOMP_BRIDGE_PORT / STOMP_BRIDGE_HTTP_PORT.", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
