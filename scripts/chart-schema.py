"""Write the `config` part of helm/stomp-bridge/values.schema.json from the settings model.

`helm lint`/`helm install` then reject a misspelt or mistyped bridge setting in the chart's
`config:` map, with the same ranges as the bridge itself. A unit test fails when the schema
and the model drift apart: run `.venv/bin/python scripts/chart-schema.py` after adding a setting.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SCHEMA = Path(__file__).resolve().parents[1] / "helm" / "stomp-bridge" / "values.schema.json"

# Settings the chart renders itself from ports/tls/websocket values (they must match the
# Service, probes and mounts), and secrets, which come from the Secret as environment variables.
CHART_OWNED = frozenset({
    "port", "http_port", "tls_port", "tls_cert_file", "tls_key_file", "tls_ca_file",
    "tls_min_version", "tls_verify_peer", "tls_fail_if_no_peer_cert", "ssl_cert_login",
    "ws_port", "ws_path", "wss_port", "ws_allowed_origins",
})
FROM_SECRET = frozenset({"amqp_url", "default_pass"})
KEEP = ("type", "anyOf", "items", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
        "pattern", "enum", "description")


# Rules across settings the bridge refuses to start without, checked by `helm install` already.
CROSS_RULES = [
    {   # trust is explicit: proxy_protocol names the balancers that may send the header
        "if": {"properties": {"proxy_protocol": {"const": True}}, "required": ["proxy_protocol"]},
        "then": {
            "required": ["proxy_protocol_trusted"],
            "properties": {"proxy_protocol_trusted": {"minItems": 1, "minLength": 1}},
        },
    },
]


def _clean(node: dict) -> dict:
    out = {k: node[k] for k in KEEP if k in node}
    if "anyOf" in out:
        out["anyOf"] = [_clean(n) for n in out["anyOf"]]
    if "items" in out:
        out["items"] = _clean(out["items"])
    return out


def config_schema() -> dict:
    from stomp_bridge.settings import Settings

    props = {}
    for name, node in Settings.model_json_schema()["properties"].items():
        if name in CHART_OWNED or name in FROM_SECRET:
            continue
        prop = _clean(node)
        if prop.get("type") == "array":  # list settings also take a comma-separated string
            description = prop.pop("description", "")
            prop = {"anyOf": [prop, {"type": "string"}], "description": description}
        props[name] = prop
    return {
        "type": "object",
        "description": "Bridge settings by name (docs/configuration.md); rendered to a file "
        "passed with --config. Ports, TLS and WebSocket come from ports/tls/websocket; "
        "the RabbitMQ URL and default login from secret.",
        "additionalProperties": False,
        "properties": props,
        "allOf": CROSS_RULES,
    }


def main() -> int:
    schema = json.loads(SCHEMA.read_text())
    schema["properties"]["config"] = config_schema()
    SCHEMA.write_text(json.dumps(schema, indent=2) + "\n")
    print(f"wrote {SCHEMA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
