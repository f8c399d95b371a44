"""Drives a real `stepwright serve` through the client openapi-python-client generated
(importable as `generated`): every answer parses into its model, and every run status does."""

import json
import socket
import subprocess
import sys
import tempfile
import time

import httpx
from generated import AuthenticatedClient
from generated.api.default import (
    health,
    interrupt_inbox,
    list_queues,
    list_runs,
    list_tasks,
    list_workers,
    list_workflows,
    register_workflow,
    show_run,
    start_run,
    stream_run_events,
)
from generated.models import Health, RegisterWorkflow, RunDetails, StartRun

BIN = sys.argv[1]
db = f"sqlite://{tempfile.mkdtemp()}/clients.db"
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
url = f"http://127.0.0.1:{port}"
key = json.loads(
    subprocess.run(
        [BIN, "--db", db, "keys", "create", "--namespace", "acme", "--user", "ann", "--role", "admin", "--role", "approver", "--json"],
        check=True, capture_output=True, text=True,
    ).stdout
)["secret"]
server = subprocess.Popen([BIN, "--db", db, "serve", "--listen", f"127.0.0.1:{port}"], stderr=subprocess.DEVNULL)
try:
    for _ in range(300):
        try:
            if httpx.get(f"{url}/v1/health").status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.05)
    client = AuthenticatedClient(base_url=url, token=key, raise_on_unexpected_status=True)

    def ok(value, kind):
        assert isinstance(value, kind), f"expected {kind.__name__}, got {type(value).__name__}: {value!r}"
        return value

    ok(health.sync(client=client), Health)
    greet = "workflow: greet\nsteps:\n  - id: hello\n    set: \"{{ 'Hello, ' ~ input.name }}\"\n"
    ask = "workflow: ask\nsteps:\n  - id: ok\n    approval: { message: Go? }\n"
    fail = "workflow: fail\nsteps:\n  - id: boom\n    set: \"{{ input.missing.deeper }}\"\n"
    for source in (greet, ask, fail):
        register_workflow.sync(client=client, body=RegisterWorkflow(source=source))
    statuses = set()
    for name in ("greet", "ask", "fail"):
        body = StartRun(workflow=name, input_={"name": "Ada"}, wait_seconds=5)
        run = ok(start_run.sync(client=client, body=body), RunDetails)
        shown = ok(show_run.sync(run.run_id, client=client), RunDetails)
        statuses.add(str(shown.status))
        # The event stream parses as its text (what a generated client can do with SSE).
        if str(shown.status) in ("completed", "failed"):
            stream = stream_run_events.sync_detailed(run.run_id, client=client)
            assert stream.status_code == 200 and "event:" in stream.content.decode()
    assert {"completed", "suspended", "failed"} <= statuses, statuses
    listed = list_runs.sync(client=client)
    assert listed is not None and len(listed.runs) == 3
    ok(list_workflows.sync(client=client), list)
    inbox = interrupt_inbox.sync(client=client)
    assert isinstance(inbox, list) and len(inbox) == 1
    for call in (list_tasks, list_queues, list_workers):
        assert call.sync(client=client) is not None
    # Every run status parses (a real answer with each status in turn).
    real = show_run.sync_detailed(listed.runs[0].run_id, client=client)
    for status in ("pending", "running", "suspended", "completed", "failed", "cancelled"):
        answer = json.loads(real.content)
        answer["status"] = status
        assert str(RunDetails.from_dict(answer).status) == status
    print(f"clients: the generated Python client parsed every answer ({sorted(statuses)} seen)")
finally:
    server.terminate()
    server.wait(timeout=30)
