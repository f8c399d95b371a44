"""Two (or more) builds of the Python package compared in one run, each `AsyncWorker` in a
process of its own, as users deploy it: one `stepwright serve` (SQLite), the `http` tool's
floor, and a run of each kind in turn, round after round, so a noisy machine weighs on every
side alike. Then, for each side in turn, a backlog of runs (each suspended, waiting for a
worker) drained by a fresh worker process.

    python sdks/python/bench_compare.py BIN NAME=PYTHONPATH[=PYTHON] ...
    # e.g. before and after a change, the old tree in a git worktree:
    python sdks/python/bench_compare.py target/release/stepwright \\
        before=/tmp/base/sdks/python=/tmp/venv-base/bin/python after=sdks/python

Prints, per side: the p50 of a run with one worker step and its overhead over the floor's
p50, the worker's CPU per task (from /proc), and the drain's tasks per second with the CPU
`serve` and the worker used. ROUNDS (300) and BACKLOG (3000) are read from the environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import ThreadingHTTPServer

import httpx

from bench import Echo, start_serve  # the floor's server and `serve`, as bench.py starts them

SIDES = [side.split("=") for side in sys.argv[2:]]
ROUNDS = int(os.environ.get("ROUNDS", "300"))
BACKLOG = int(os.environ.get("BACKLOG", "3000"))
WARM = 20

WORKER = """
import asyncio, sys, time
from stepwright import AsyncWorker
url, key, queue, expected = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
worker = AsyncWorker(url, key, queue=queue, slots=200, wait_seconds=30)
seen = {"n": 0}

@worker.handler("inc")
async def inc(ctx, task_input):
    seen["n"] += 1
    if seen["n"] == expected:
        print(time.time(), flush=True)  # the backlog's last handler started
    return {"n": task_input.get("n", 0) + 1}

asyncio.run(worker.run())
"""


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def workflow(name: str, tool: str) -> dict[str, str]:
    common = "    effect: read\n    input: { type: object }\n"
    return {"source": f"workflow: {name}\ntools:\n  inc:\n    {tool}\n{common}steps:\n  - id: call\n    tool: inc\n    with: {{ n: 1 }}\n"}


def spawn(side: list[str], url: str, key: str, queue: str, expected: int) -> subprocess.Popen[str]:
    name, path, python = (side + [sys.executable])[:3]
    env = dict(os.environ, PYTHONPATH=path)
    return subprocess.Popen([python, "-c", WORKER, url, key, queue, str(expected)], env=env, stdout=subprocess.PIPE, text=True)


def main() -> None:
    server, url, key = start_serve()
    echo = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=echo.serve_forever, daemon=True).start()
    workers: list[subprocess.Popen[str]] = []
    try:
        http = httpx.Client(base_url=url, headers={"authorization": f"Bearer {key}"}, timeout=30)
        http.post("/v1/workflows", json=workflow("via-http", f'http: {{ url: "http://127.0.0.1:{echo.server_address[1]}/echo" }}')).raise_for_status()
        for side in SIDES:
            http.post("/v1/workflows", json=workflow(f"via-{side[0]}", f"worker: {{ queue: {side[0]} }}")).raise_for_status()
            workers.append(spawn(side, url, key, side[0], -1))
        time.sleep(1.0)

        kinds = ["http"] + [side[0] for side in SIDES]
        times: dict[str, list[float]] = {kind: [] for kind in kinds}
        cpu_at_start: list[float] = []
        for round_ in range(WARM + ROUNDS):
            if round_ == WARM:
                cpu_at_start = [cpu_seconds(w.pid) for w in workers]
            for kind in kinds:
                begun = time.perf_counter()
                run = http.post("/v1/runs", json={"workflow": f"via-{kind}", "input": {}, "wait_seconds": 10}).json()
                assert run["status"] == "completed", run
                if round_ >= WARM:
                    times[kind].append((time.perf_counter() - begun) * 1000)
        cpu_per_task = [(cpu_seconds(w.pid) - at) * 1000 / ROUNDS for w, at in zip(workers, cpu_at_start)]
        for w in workers:
            w.kill()
        p50 = {kind: sorted(values)[len(values) // 2] for kind, values in times.items()}
        print(f"floor (http tool): p50 {p50['http']:.3f} ms over {ROUNDS} runs")
        for side, cpu in zip(SIDES, cpu_per_task):
            name = side[0]
            print(f"{name}: p50 {p50[name]:.3f} ms, overhead {p50[name] - p50['http']:+.3f} ms; worker CPU {cpu:.2f} ms a task")

        for side in SIDES:
            queue = f"backlog-{side[0]}"
            http.post("/v1/workflows", json=workflow(queue, f"worker: {{ queue: {queue} }}")).raise_for_status()
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(lambda _: http.post("/v1/runs", json={"workflow": queue, "input": {}}), range(BACKLOG)))
            # Every task queued, and the last runs' 2 s hold over (they suspended).
            while not any(q["queue"] == queue and q["pending"] >= BACKLOG for q in http.get("/v1/queues").json()["queues"]):
                time.sleep(0.05)
            time.sleep(2.5)
            serve_before, begun = cpu_seconds(server.pid), time.time()
            drainer = spawn(side, url, key, queue, BACKLOG)
            assert drainer.stdout is not None
            last_started = float(drainer.stdout.readline())
            used = (cpu_seconds(server.pid) - serve_before, cpu_seconds(drainer.pid))
            print(f"{side[0]}: {BACKLOG} suspended runs drained at {BACKLOG / (last_started - begun):.0f}/s (the worker's start included); CPU: serve {used[0]:.2f} s, worker {used[1]:.2f} s")
            drainer.kill()
            time.sleep(2.0)
    finally:
        for w in workers:
            w.kill()
        server.terminate()
        server.wait(timeout=30)
        echo.shutdown()


if __name__ == "__main__":
    main()
