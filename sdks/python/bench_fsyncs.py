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
import tempfile
import threading
from http.server import ThreadingHTTPServer
from typing import Any

from bench import Echo, start_serve
from stepwright import AsyncWorker, Client

RUNS = 40


def main() -> None:
    trace = os.path.join(tempfile.mkdtemp(), "strace.out")
    server, url, key = start_serve(("strace", "-f", "-qq", "-e", "trace=fsync,fdatasync", "-o", trace))
    echo = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=echo.serve_forever, daemon=True).start()
    try:
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
        # `serve` is strace's child: stopped itself, strace ends with it (a SIGTERM to strace
        # may leave it waiting on its tracee).
        subprocess.run(["pkill", "-TERM", "-P", str(server.pid)], check=False)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        echo.shutdown()


if __name__ == "__main__":
    main()
