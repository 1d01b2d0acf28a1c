"""``python -m stomp_bridge.healthcheck [healthz|readyz]``: the container image's HEALTHCHECK.

A slim image has no curl, and a probe with the port written into it breaks as soon as
someone sets ``STOMP_BRIDGE_HTTP_PORT``: this reads the same settings as the bridge
(environment, ``--config`` or ``STOMP_BRIDGE_CONFIG``) and asks the bridge's own endpoint.
Exit 0 when it answers 200, else 1 with the reason on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.request

from pydantic import ValidationError

from stomp_bridge.settings import load

WILDCARDS = ("", "0.0.0.0", "::", "[::]")


def url_for(http_host: str, http_port: int, path: str) -> str:
    host = "127.0.0.1" if http_host in WILDCARDS else http_host
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{http_port}/{path}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stomp_bridge.healthcheck")
    parser.add_argument("path", nargs="?", default="healthz", choices=["healthz", "readyz"])
    parser.add_argument("--config", default=os.environ.get("STOMP_BRIDGE_CONFIG"))
    parser.add_argument("--timeout", type=float, default=2.0)
    args = parser.parse_args(argv)
    try:
        settings = load(args.config)
    except (ValidationError, OSError, ValueError) as exc:
        print(f"healthcheck: cannot read the bridge's settings: {exc}", file=sys.stderr)
        return 1
    if settings.http_port is None:
        print("healthcheck: http_port is unset, so the bridge has no health endpoint; set "
              "STOMP_BRIDGE_HTTP_PORT or drop the HEALTHCHECK", file=sys.stderr)
        return 1
    url = url_for(settings.http_host, settings.http_port, args.path)
    try:
        with urllib.request.urlopen(url, timeout=args.timeout) as resp:
            return 0 if resp.status == 200 else 1
    except urllib.error.HTTPError as exc:
        print(f"healthcheck: {url} answered {exc.code}: {exc.read().decode(errors='replace').strip()}",
              file=sys.stderr)
    except OSError as exc:
        print(f"healthcheck: {url} did not answer: {exc}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
