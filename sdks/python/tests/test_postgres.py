"""The same protocol on Postgres, with two `stepwright serve` processes on one database: a
run started through one is worked through the other (the task dispatched by one process,
claimed and answered through the other), and a killed worker's `read` step runs again.
Runs when `STEPWRIGHT_TEST_DATABASE_URL` is set (CI sets it), in a schema of its own."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from conftest import BIN, free_port  # noqa: E402
from stepwright import Client, Worker

DATABASE = os.environ.get("STEPWRIGHT_TEST_DATABASE_URL")
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str]]]:
    if not DATABASE:
        pytest.skip("STEPWRIGHT_TEST_DATABASE_URL is not set")
    assert shutil.which("psql"), "psql makes the test's schema"
    schema = f"sw_sdk_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    subprocess.run(["psql", DATABASE, "-q", "-c", f"CREATE SCHEMA {schema}"], check=True)
    separator = "&" if "?" in DATABASE else "?"
    db = f"{DATABASE}{separator}options=-c%20search_path%3D{schema}"
    processes, urls = [], []
    log = open(tmp_path_factory.mktemp("pg") / "serve.log", "wb")
    for _ in range(2):
        port = free_port()
        processes.append(
            subprocess.Popen([BIN, "--db", db, "serve", "--listen", f"127.0.0.1:{port}"], stdout=log, stderr=log)
        )
        urls.append(f"http://127.0.0.1:{port}")
    for url in urls:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "serve did not start on Postgres"
            time.sleep(0.05)
    try:
        yield db, urls
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=30)
        subprocess.run(["psql", DATABASE, "-q", "-c", f"DROP SCHEMA {schema} CASCADE"], check=False)


def key_for(db: str, namespace: str) -> str:
    args = [BIN, "--db", db, "keys", "create", "--namespace", namespace, "--user", "pg", "--role", "admin", "--role", "worker", "--json"]
    return str(json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)["secret"])


def test_a_run_started_through_one_server_is_worked_through_the_other(servers: tuple[str, list[str]], namespace: str) -> None:
    db, (first, second) = servers
    key = key_for(db, namespace)
    source = "workflow: across\ntools:\n  upper:\n    worker: { queue: pg }\n    effect: read\nsteps:\n  - id: call\n    tool: upper\n    with: { text: \"{{ input.text }}\" }\n"
    with Client(first, key) as c:
        c.workflows.register(source)
        worker = Worker(second, key, queue="pg", wait_seconds=2)

        @worker.handler("upper")
        def upper(ctx: Any, task_input: dict[str, Any]) -> dict[str, Any]:
            return {"text": task_input["text"].upper()}

        import threading

        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        runs = [c.runs.start("across", {"text": f"run {n}"}) for n in range(5)]
        done = [c.runs.wait(r["run_id"], timeout=60) for r in runs]
        worker.stop()
        thread.join(timeout=10)
    assert [d["status"] for d in done] == ["completed"] * 5, done
    assert [d["output"]["text"] for d in done] == [f"RUN {n}" for n in range(5)]


def test_on_postgres_a_killed_workers_read_step_runs_again(
    servers: tuple[str, list[str]], namespace: str, tmp_path: Path
) -> None:
    db, (first, second) = servers
    key = key_for(db, namespace)
    source = (
        "workflow: pg-resilient\ntools:\n  slow:\n    worker: { queue: pg-slow, heartbeat_timeout: 1s }\n    effect: read\n"
        "steps:\n  - id: call\n    tool: slow\n    with: { sleep: \"{{ input.sleep }}\" }\n    retry: { max_attempts: 3, initial_delay: 10ms }\n"
    )
    calls = tmp_path / "calls"
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    spawn = lambda url, label: subprocess.Popen(  # noqa: E731
        [sys.executable, str(HERE / "slow_worker.py"), url, key, "pg-slow", str(calls), label], env=env
    )
    with Client(first, key) as c:
        c.workflows.register(source)
        doomed = spawn(second, "doomed")
        run = c.runs.start("pg-resilient", {"sleep": 30})
        deadline = time.monotonic() + 20
        while not (calls.exists() and calls.read_text()):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        doomed.send_signal(signal.SIGKILL)
        doomed.wait()
        survivor = spawn(first, "survivor")
        try:
            deadline = time.monotonic() + 30
            while len(calls.read_text().splitlines()) < 2:
                assert time.monotonic() < deadline, "the retry was not dispatched"
                time.sleep(0.05)
        finally:
            survivor.send_signal(signal.SIGKILL)
            survivor.wait()
        states = {t["attempt"]: t["state"] for t in c.tasks.list(run=run["run_id"])}
        assert states[1] == "lapsed", states
        c.runs.cancel(run["run_id"])
