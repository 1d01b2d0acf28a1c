"""JWTs for the OAuth 2 tests, signed with the test brokers' key (scripts/rabbitmq4 sets up
RabbitMQ's rabbitmq_auth_backend_oauth2 with it, beside the internal users).

HS256 with the standard library: no identity provider and no JWT package needed. The key is a
published test value, not a secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

KEY_ID = "stomp-bridge-test"
SIGNING_KEY = b"stomp-bridge-test-signing-key-not-a-secret"
RESOURCE_SERVER = "stomp-bridge"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def token(subject: str, *, expires_in: float = 3600, scopes: tuple[str, ...] | None = None) -> str:
    """A token for ``subject`` that RabbitMQ reads as full permissions on every vhost, expiring
    ``expires_in`` seconds from now (negative: already expired)."""
    if scopes is None:
        scopes = tuple(f"{RESOURCE_SERVER}.{p}:*/*" for p in ("configure", "write", "read"))
    header = {"alg": "HS256", "typ": "JWT", "kid": KEY_ID}
    now = int(time.time())
    claims = {"sub": subject, "aud": [RESOURCE_SERVER], "scope": list(scopes), "iat": now,
              "exp": now + int(expires_in)}
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    signature = hmac.new(SIGNING_KEY, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(signature)}"
