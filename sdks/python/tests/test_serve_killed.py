"""`serve` killed with SIGKILL once it has handed a `read` step to a worker queue. On SQLite that
dispatch is committed without its own fsync (decision 93: the synced commit after it carries it
to the disk), which a power loss could take back but a process crash must not: the restarted
server has the same task, and the run completes when a worker answers it, its handler run once."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from conftest import BIN, free_port  # noqa: E402
from stepwright import Client, Worker


def serve(db: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    out = open(log, "ab")
    process = subprocess.Popen([BIN, "--db", db, "serve", "--listen", f"127.0.0.1:{port}"], stdout=out, stderr=out)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=1).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"serve did not start: {log.read_text()}")


def test_a_read_task_dispatched_before_serve_is_killed_is_there_after_a_restart(tmp_path: Path) -> None:
    db = f"sqlite://{tmp_path / 'killed.db'}"
    args = [BIN, "--db", db, "keys", "create", "--namespace", "killed", "--user", "t", "--role", "admin", "--role", "worker", "--json"]
    key = str(json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)["secret"])
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    first = serve(db, port, log)
    try:
        client = Client(url, key)
        client.workflows.register(
            "workflow: killed\ntools:\n  inc:\n    worker: { queue: killed }\n    effect: read\n"
            "steps:\n  - id: call\n    tool: inc\n    with: { n: 1 }\n"
        )
        run_id = client.runs.start("killed", None)["run_id"]  # not waiting: no worker polls yet
        deadline = time.monotonic() + 10
        while not (before := client.tasks.list(run=run_id)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [t["state"] for t in before] == ["pending"], before
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    second = serve(db, port, log)
    try:
        client = Client(url, key)
        after = client.tasks.list(run=run_id)
        assert [(t["id"], t["state"], t["created_at"]) for t in after] == [
            (before[0]["id"], "pending", before[0]["created_at"])
        ], "the same task, as it was dispatched before the kill"
        calls: list[int] = []
        worker = Worker(url, key, queue="killed", wait_seconds=1)

        @worker.handler("inc")
        def inc(ctx: Any, task_input: dict[str, Any]) -> dict[str, Any]:
            calls.append(task_input["n"])
            return {"n": task_input["n"] + 1}

        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        done = client.runs.wait(run_id, timeout=30)
        worker.stop()
        thread.join(timeout=10)
        assert done["status"] == "completed", done
        assert done["output"] == {"n": 2}
        assert calls == [1], "the handler ran once"
    finally:
        second.terminate()
        second.wait()
