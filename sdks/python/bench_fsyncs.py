"""`fsync`s that `serve` (SQLite, `synchronous = FULL`) makes per run: a run of one worker step
against a run of one `http` tool calling the same function, counted with strace.

    python sdks/python/bench_fsyncs.py target/release/stepwright    # needs strace

Prints, per workflow and round, the `fsync`/`fdatasync` calls per run (40 runs after 3
warm-up runs). A worker step's dispatch and answer of a `read` tool are left to the synced
commit after them (decision 93), so both lines should read the same.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from http.server import ThreadingHTTPServer
from typing import Any

import httpx

from bench import Echo, free_port
from stepwright import AsyncWorker, Client

BIN = sys.argv[1]
RUNS = 40


def main() -> None:
    store = tempfile.mkdtemp()
    db = f"sqlite://{store}/bench.db"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = [BIN, "--db", db, "keys", "create", "--namespace", "bench", "--user", "b", "--role", "admin", "--role", "worker", "--json"]
    key = str(json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)["secret"])
    trace = os.path.join(store, "strace.out")
    serve = [BIN, "--db", db, "serve", "--listen", f"127.0.0.1:{port}", "--rate-limit", "1000000"]
    server = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=fsync,fdatasync", "-o", trace, *serve], stderr=subprocess.DEVNULL)
    echo = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=echo.serve_forever, daemon=True).start()
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{url}/v1/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        client = Client(url, key)
        common = "    effect: read\n    input: { type: object }\nsteps:\n  - id: call\n    tool: inc\n    with: { n: 1 }\n"
        client.workflows.register(f"workflow: via-worker\ntools:\n  inc:\n    worker: {{ queue: bench }}\n{common}")
        echo_url = f"http://127.0.0.1:{echo.server_address[1]}/echo"
        client.workflows.register(f"workflow: via-http\ntools:\n  inc:\n    http: {{ url: \"{echo_url}\" }}\n{common}")

        def syncs() -> int:
            with open(trace) as f:
                return sum(1 for line in f if "sync(" in line)

        async def rounds() -> None:
            worker = AsyncWorker(url, key, queue="bench", slots=10, wait_seconds=1)

            @worker.handler("inc")
            async def inc(ctx: Any, task_input: dict[str, Any]) -> dict[str, Any]:
                return {"n": task_input["n"] + 1}

            running = asyncio.create_task(worker.run())
            await asyncio.sleep(0.5)
            for workflow in ["via-http", "via-worker", "via-http", "via-worker"]:
                for _ in range(3):
                    await asyncio.to_thread(client.runs.start, workflow, {}, wait_seconds=10)
                before = syncs()
                for _ in range(RUNS):
                    run = await asyncio.to_thread(client.runs.start, workflow, {}, wait_seconds=10)
                    assert run["status"] == "completed", run
                await asyncio.sleep(0.3)
                print(json.dumps({"workflow": workflow, "fsyncs_per_run": round((syncs() - before) / RUNS, 2)}))
            worker.stop()
            await asyncio.wait_for(running, 10)

        asyncio.run(rounds())
    finally:
        server.terminate()
        server.wait()
        echo.shutdown()


if __name__ == "__main__":
    main()
