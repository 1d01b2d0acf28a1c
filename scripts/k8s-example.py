"""Write deploy/kubernetes/stomp-bridge.yaml: the Helm chart rendered once, for `kubectl apply`.

The plain manifest is the chart's output with deploy/kubernetes/values.yaml, minus Helm's own
labels, so the two never drift apart (a test re-renders it and compares).
Run: `.venv/bin/python scripts/k8s-example.py` (needs helm: `bash scripts/fetch-helm`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "deploy" / "kubernetes" / "stomp-bridge.yaml"
VALUES = ROOT / "deploy" / "kubernetes" / "values.yaml"
HEADER = """\
# stomp-bridge for Kubernetes without Helm: kubectl create namespace messaging &&
#   kubectl apply -n messaging -f deploy/kubernetes/stomp-bridge.yaml
# Edit the Secret's amqp-url first (RabbitMQ node(s); each STOMP client logs in as itself).
# The image is built from the Dockerfile (docker build -t stomp-bridge:0.1.0 .); push it
# where your cluster pulls from and change `image:`.
# Generated from the Helm chart by scripts/k8s-example.py; edit the chart, not this file.
"""


def render() -> str:
    helm = os.environ.get("HELM") or str(ROOT / ".tools" / "bin" / "helm")
    out = subprocess.run(
        [helm, "template", "stomp-bridge", str(ROOT / "helm" / "stomp-bridge"),
         "--namespace", "messaging", "-f", str(VALUES)],
        check=True, capture_output=True, text=True,
    ).stdout
    lines = []
    for line in out.splitlines():
        if line.strip().startswith(("helm.sh/chart:", "checksum/")) or line.startswith("# Source:"):
            continue
        if lines and lines[-1].strip() == "annotations:" and not line.startswith(lines[-1][:-12] + "  "):
            lines.pop()  # only Helm's checksums were in it
        lines.append(line.replace("app.kubernetes.io/managed-by: Helm", "app.kubernetes.io/managed-by: kubectl"))
    return HEADER + "\n".join(lines).strip() + "\n"


def main() -> int:
    OUT.write_text(render())
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
