"""testkit.management against a scripted HTTP server: no broker needed."""

from __future__ import annotations

import base64
import http.server
import json
import threading
import urllib.error
from collections.abc import Iterator

import pytest

from testkit.management import Management


class Api(http.server.ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.answers: dict[tuple[str, str], tuple[int, object]] = {}
        self.seen: list[tuple[str, str, object, str]] = []


class Handler(http.server.BaseHTTPRequestHandler):
    server: Api

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.server.seen.append((self.command, self.path, body, self.headers["Authorization"]))
        status, payload = self.server.answers.get((self.command, self.path), (204, None))
        raw = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    do_GET = do_PUT = do_POST = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api() -> Iterator[Api]:
    server = Api()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def management(api: Api) -> Management:
    return Management(f"http://127.0.0.1:{api.server_address[1]}/api/", "ann", "secret")


def test_requests_carry_basic_auth_and_quote_names(api):
    management(api).delete_queue("a/b", vhost="/")
    method, path, _, auth = api.seen[0]
    assert (method, path) == ("DELETE", "/api/queues/%2F/a%2Fb")
    assert auth == "Basic " + base64.b64encode(b"ann:secret").decode()


def test_404_is_none_and_other_errors_raise(api):
    api.answers[("GET", "/api/queues/%2F/gone")] = (404, {"error": "Object Not Found"})
    api.answers[("GET", "/api/overview")] = (500, {"error": "boom"})
    assert management(api).queue("gone") is None
    with pytest.raises(urllib.error.HTTPError):
        management(api).overview()


def test_arguments_leave_out_the_classic_queue_type_rabbitmq_4_records(api):
    api.answers[("GET", "/api/queues/%2F/q")] = (200, {"arguments": {"x-queue-type": "classic", "x-max-length": 5}})
    assert management(api).arguments("q") == {"x-max-length": 5}


def test_temporary_vhost_is_new_and_open_to_its_user(api):
    name = management(api).temporary_vhost("rel", user="ann")
    assert name.startswith("rel-") and len(name) == len("rel-") + 10
    assert [(m, p) for m, p, _, _ in api.seen] == [
        ("PUT", f"/api/vhosts/{name}"), ("PUT", f"/api/permissions/{name}/ann")]
    assert api.seen[1][2] == {"configure": ".*", "write": ".*", "read": ".*"}


def test_topic_queues_are_the_queues_bound_under_a_key_prefix(api):
    api.answers[("GET", "/api/exchanges/%2F/amq.topic/bindings/source")] = (200, [
        {"destination": "q2", "destination_type": "queue", "routing_key": "bench.x.1"},
        {"destination": "q1", "destination_type": "queue", "routing_key": "bench.x.2"},
        {"destination": "q1", "destination_type": "queue", "routing_key": "bench.x.3"},
        {"destination": "e", "destination_type": "exchange", "routing_key": "bench.x.4"},
        {"destination": "q3", "destination_type": "queue", "routing_key": "other"},
    ])
    assert management(api).topic_queues("bench.x") == ["q1", "q2"]


def test_file_descriptors_are_none_until_the_api_reports_them(api):
    api.answers[("GET", "/api/nodes")] = (200, [{"name": "rabbit@h"}])
    assert management(api).file_descriptors() is None
    api.answers[("GET", "/api/nodes")] = (200, [{"fd_used": 40, "fd_total": 1024}])
    assert management(api).file_descriptors() == (40, 1024)
