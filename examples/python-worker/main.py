"""Runs the example end to end, offline: a `stepwright serve` on a fresh SQLite store that
answers model calls from the recorded cassette, a key for this example, the workflow
registered, the Python worker in this process, one run started and waited for.

    cargo build -p stepwright-cli && pip install ./sdks/python
    python examples/python-worker/main.py
"""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import httpx

from stepwright import Client

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
BIN = os.environ.get("STEPWRIGHT_BIN") or shutil.which("stepwright") or str(ROOT / "target" / "debug" / "stepwright")

QUESTION = "What does the document say a journal is for?"
DOCUMENT = (
    "A durable engine journals every step of a run. The journal is what lets a run survive a crash, "
    "wait days for a person, and resume on any machine. Steps written in Python run in step workers; "
    "the engine keeps their retries, timeouts and the effect fence."
)


def main() -> None:
    from worker import make_worker

    store = tempfile.mkdtemp()
    db = f"sqlite://{store}/example.db"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    created = subprocess.run(
        [BIN, "--db", db, "keys", "create", "--namespace", "example", "--user", "you", "--role", "admin", "--role", "worker", "--json"],
        check=True, capture_output=True, text=True,
    )
    key = json.loads(created.stdout)["secret"]
    cassette = [str(HERE / "research.cassette.json"), "--cassette-mode", os.environ.get("CASSETTE_MODE", "replay")]
    server = subprocess.Popen(
        [BIN, "--db", db, "serve", "--listen", f"127.0.0.1:{port}", "--cassette", *cassette, *os.environ.get("STEPWRIGHT_EXAMPLE_MODEL_ARGS", "").split()],
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{url}/v1/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        worker = make_worker(url, key)
        threading.Thread(target=worker.run, daemon=True).start()
        with Client(url, key) as client:
            client.workflows.register((HERE / "research.yaml").read_text())
            run = client.runs.start("research-notes", {"question": QUESTION, "document": DOCUMENT})
            done = client.runs.wait(run["run_id"], timeout=60)
            worker.stop()
            print(f"run {done['run_id']}: {done['status']}")
            print(json.dumps(done["output"], indent=2))
            calls = client.tasks.list(run=run["run_id"])
            print(f"{len(calls)} call(s) of a Python tool: " + ", ".join(f"{t['handler']} at {t['step']} ({t['state']})" for t in calls))
            if done["status"] != "completed":
                raise SystemExit(1)
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
