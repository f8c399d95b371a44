"""Push mode against a real `stepwright serve`: an `http` tool with `async: true` sends each
call as a signed task to an endpoint (here a plain HTTP server in this process), which
accepts it (`202`) and completes it later through the task endpoints under its lease."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest
from conftest import PUSH_SECRET

from stepwright import Client, Conflict, sign, verify_signature


class Endpoint:
    """A push endpoint: records each request (verified against the secret) and answers
    with `status` and `answer`."""

    def __init__(self, status: int, answer: Any = None) -> None:
        self.received: list[tuple[bool, dict[str, Any]]] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                signed = verify_signature(PUSH_SECRET, self.headers.get("Stepwright-Signature"), body)
                endpoint.received.append((signed, json.loads(body)))
                payload = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/summarise"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()


def pushed_workflow(name: str, url: str, effect: str = "write") -> str:
    return f"""
workflow: {name}
tools:
  summarise:
    http: {{ url: "{url}", signing_secret_env: STEPWRIGHT_SDK_TEST_PUSH_SECRET, async: true, heartbeat_timeout: 1m }}
    effect: {effect}
steps:
  - id: call
    tool: summarise
    with: {{ doc: "{{{{ input.doc }}}}" }}
"""


@pytest.fixture
def client(server: Any, namespace: str) -> Iterator[Client]:
    with Client(server.url, server.key(namespace)) as client:
        yield client


def test_a_pushed_task_is_signed_accepted_and_completed_later_under_its_lease(client: Client) -> None:
    endpoint = Endpoint(202, {"accepted": True})
    try:
        client.workflows.register(pushed_workflow("pushed", endpoint.url))
        run = client.runs.start("pushed", {"doc": "a long document"})
        deadline = time.monotonic() + 20
        while not endpoint.received and time.monotonic() < deadline:
            time.sleep(0.02)
        signed, task = endpoint.received[0]
        assert signed, "signed with the secret the server's environment holds"
        assert (task["queue"], task["handler"], task["lease"]) == ("push", "summarise", 1)
        assert task["input"] == {"doc": "a long document"} and task["run"]["id"] == run["run_id"]
        assert task["idempotency_key"], "a write carries the fence's key"

        # The run waits on the task, which the endpoint holds; nobody else may answer it.
        waits = client.runs.get(run["run_id"])["tasks"]
        assert [(w["state"], w["worker"]) for w in waits] == [("claimed", endpoint.url)], waits
        with pytest.raises(Conflict):
            client.tasks.complete(task["id"], task["lease"] + 1, {"summary": "forged"})
        client.tasks.complete(task["id"], task["lease"], {"summary": "short"})
        done = client.runs.wait(run["run_id"], timeout=30)
        assert done["status"] == "completed" and done["output"] == {"summary": "short"}, done
        assert len(endpoint.received) == 1, "pushed once"
    finally:
        endpoint.close()


def test_an_endpoint_that_answers_at_once_completes_the_step(client: Client) -> None:
    endpoint = Endpoint(200, {"summary": "at once"})
    try:
        client.workflows.register(pushed_workflow("answered", endpoint.url, effect="read"))
        run = client.runs.start("answered", {"doc": "d"})
        done = client.runs.wait(run["run_id"], timeout=30)
        assert done["output"] == {"summary": "at once"}, done
        assert [t["state"] for t in client.tasks.list(run=run["run_id"])] == ["completed"]
    finally:
        endpoint.close()


def test_a_signature_is_checked_over_the_exact_body_and_its_time() -> None:
    body = b'{"id":"tsk_1"}'
    header = sign("k", body)
    assert verify_signature("k", header, body)
    assert not verify_signature("other", header, body)
    assert not verify_signature("k", header, body + b" ")
    assert not verify_signature("k", sign("k", body, at=int(time.time()) - 3600), body), "too old"
    assert not verify_signature("k", None, body) and not verify_signature("k", "garbage", body)
