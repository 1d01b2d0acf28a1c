# syntax=docker/dockerfile:1
# The stomp-bridge image: `docker build -t stomp-bridge .`; `docker compose up` runs it with RabbitMQ.
#
# CI has no Docker engine, so tests/deploy/test_image_install.py replays the build stage's
# COPY and RUN lines on the host and starts the result the way ENTRYPOINT does: keep them
# plain shell with absolute paths (/src, /wheels, /opt/stomp-bridge).
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY stomp_bridge/ stomp_bridge/
RUN python -m pip wheel --no-deps --wheel-dir /wheels .
RUN python -m venv /opt/stomp-bridge \
    && /opt/stomp-bridge/bin/pip install "$(ls /wheels/stomp_bridge-*.whl)[speed]"

# The final stage gets the virtual environment only: no pip cache, wheels or build tools.
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="stomp-bridge" \
      org.opencontainers.image.description="STOMP 1.0/1.1/1.2 gateway in front of RabbitMQ" \
      org.opencontainers.image.licenses="MIT"
RUN useradd --system --no-log-init --uid 10001 --user-group --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin stomp
COPY --from=build /opt/stomp-bridge /opt/stomp-bridge
ENV PATH=/opt/stomp-bridge/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    STOMP_BRIDGE_LOG_FORMAT=json
USER 10001:10001
# 61613 STOMP (port), 61614 STOMP over TLS (tls_port), 15674 STOMP over WebSocket (ws_port),
# 9410 /metrics /healthz /readyz (http_port). WebSocket is on by default, TLS when configured.
EXPOSE 61613 61614 15674 9410
# SIGTERM drains: in-flight publishes get their receipts for up to shutdown_grace seconds.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-m", "stomp_bridge.healthcheck"]
ENTRYPOINT ["stomp-bridge"]
