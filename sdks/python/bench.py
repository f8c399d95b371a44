"""Step-worker benchmarks against a real `stepwright serve` (SQLite), with the floor measured
in the same run: an `http` tool calling the same function over loopback.

    python sdks/python/bench.py target/release/stepwright [--quick]

Prints one JSON object: dispatch latency (the task's dispatch to the handler's start,
both on this machine's clock), a run's end-to-end time with a worker step vs an http tool
(the worker in the bench's process, and in a process of its own),
tasks per second through one worker, cancel-to-handler latency, and an idle worker's
requests per 30 s.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from stepwright import AsyncWorker, Client, Worker

BIN = sys.argv[1]
QUICK = "--quick" in sys.argv


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * p))], 3)


def summary(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50": pct(values, 0.5), "p99": pct(values, 0.99), "mean": round(statistics.mean(values), 3)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Echo(BaseHTTPRequestHandler):
    """The floor's tool: the same function as the worker's handler, over HTTP."""

    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # Headers and body go out as two writes: without this, Nagle and delayed ACKs add
        # 40 ms to every answer, and the floor would flatter the worker.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        data = json.dumps({"n": body.get("n", 0) + 1}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


OWN_PROCESS_WORKER = """
import asyncio, sys
from stepwright import AsyncWorker
worker = AsyncWorker(sys.argv[1], sys.argv[2], queue="bench-process", slots=200, wait_seconds=30)

@worker.handler("inc")
async def inc(ctx, task_input):
    return {"n": task_input.get("n", 0) + 1}

asyncio.run(worker.run())
"""


def start_serve(under: tuple[str, ...] = ()) -> tuple[subprocess.Popen[bytes], str, str]:
    """`BIN serve` on a fresh SQLite store (run under the command `under`, if given), once it
    answers: the process, its URL, and a key of namespace `bench` with the admin and worker
    roles."""
    store = tempfile.mkdtemp()
    db = f"sqlite://{store}/bench.db"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    roles = ["--role", "admin", "--role", "worker"]
    args = [BIN, "--db", db, "keys", "create", "--namespace", "bench", "--user", "b", *roles, "--json"]
    key = json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)["secret"]
    server = subprocess.Popen([*under, BIN, "--db", db, "serve", "--listen", f"127.0.0.1:{port}", "--rate-limit", "1000000"], stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            if httpx.get(f"{url}/v1/health").status_code == 200:
                return server, url, str(key)
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    server.kill()
    raise RuntimeError(f"{BIN} serve did not answer on {url} within 15 s")


def main() -> None:
    server, url, key = start_serve()
    echo = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=echo.serve_forever, daemon=True).start()
    echo_url = f"http://127.0.0.1:{echo.server_address[1]}/echo"
    results: dict[str, Any] = {}
    own_process: subprocess.Popen[bytes] | None = None
    try:
        client = Client(url, key)
        common = "    effect: read\n    input: { type: object }\n"
        client.workflows.register(
            f"workflow: via-worker\ntools:\n  inc:\n    worker: {{ queue: bench }}\n{common}steps:\n  - id: call\n    tool: inc\n    with: {{ n: 1 }}\n"
        )
        client.workflows.register(
            f"workflow: via-http\ntools:\n  inc:\n    http: {{ url: \"{echo_url}\" }}\n{common}steps:\n  - id: call\n    tool: inc\n    with: {{ n: 1 }}\n"
        )
        started_at: dict[str, float] = {}
        worker = AsyncWorker(url, key, queue="bench", slots=200, wait_seconds=30)

        @worker.handler("inc")
        async def inc(ctx: Any, task_input: dict[str, Any]) -> dict[str, Any]:
            started_at[ctx.task_id] = time.time()
            return {"n": task_input.get("n", 0) + 1}

        threading.Thread(target=lambda: asyncio.run(worker.run()), daemon=True).start()
        # The same worker as users deploy it: a process of its own (the one above shares this
        # process's interpreter with the bench's client).
        client.workflows.register(
            f"workflow: via-worker-process\ntools:\n  inc:\n    worker: {{ queue: bench-process }}\n{common}steps:\n  - id: call\n    tool: inc\n    with: {{ n: 1 }}\n"
        )
        own_process = subprocess.Popen([sys.executable, "-c", OWN_PROCESS_WORKER, url, key])
        time.sleep(0.5)
        rounds = 100 if QUICK else 400

        def timed_runs(workflow: str) -> list[float]:
            times = []
            for _ in range(rounds):
                begun = time.perf_counter()
                run = client._request("POST", "/v1/runs", json={"workflow": workflow, "input": {}, "wait_seconds": 10})
                assert run["status"] == "completed", run
                times.append((time.perf_counter() - begun) * 1000)
            return times

        # The paths warmed, then alternated so the machine's state is the same for each.
        timed_runs("via-http")
        timed_runs("via-worker")
        timed_runs("via-worker-process")
        worker_times, process_times, http_times = [], [], []
        for _ in range(2):
            http_times += timed_runs("via-http")
            worker_times += timed_runs("via-worker")
            process_times += timed_runs("via-worker-process")
        results["end_to_end_ms"] = {
            "worker_step": summary(worker_times),
            "worker_step_own_process": summary(process_times),
            "http_tool_floor": summary(http_times),
            "overhead_p50_ms": round(pct(worker_times, 0.5) - pct(http_times, 0.5), 3),
            "overhead_own_process_p50_ms": round(pct(process_times, 0.5) - pct(http_times, 0.5), 3),
        }

        tasks = client.tasks.list(queue="bench", limit=1000)
        dispatch = [
            (started_at[t["id"]] * 1e6 - t["created_at"]) / 1000 for t in tasks if t["id"] in started_at
        ]
        results["dispatch_ms"] = summary(dispatch)

        # Throughput: many runs at once, drained by one worker. First while they are started
        # (by 16 threads of this process, which share its interpreter with the worker), then
        # with the runs queued first (each suspended, waiting for a worker) and one fresh
        # worker draining them.
        burst = 500 if QUICK else 3000
        from concurrent.futures import ThreadPoolExecutor

        def start_runs(workflow: str, count: int) -> list[str]:
            with httpx.Client(base_url=url, headers={"authorization": f"Bearer {key}"}, timeout=30) as http:
                start = lambda _: http.post("/v1/runs", json={"workflow": workflow, "input": {}}).json()["run_id"]  # noqa: E731
                with ThreadPoolExecutor(16) as pool:
                    return list(pool.map(start, range(count)))

        before = len(started_at)
        begun = time.perf_counter()
        ids = start_runs("via-worker", burst)
        while len(started_at) - before < burst:
            time.sleep(0.001)
        while_started = burst / (time.perf_counter() - begun)
        client.runs.wait(ids[-1], timeout=120)

        client.workflows.register(
            f"workflow: queued\ntools:\n  inc:\n    worker: {{ queue: queued }}\n{common}steps:\n  - id: call\n    tool: inc\n    with: {{ n: 1 }}\n"
        )
        ids = start_runs("queued", burst)
        # Until every run has dispatched its task, and the last of them held for it (the
        # engine's 2 s `task_hold`) and suspended.
        queue_of = lambda: next((q for q in client.queues.list()["queues"] if q["queue"] == "queued"), None)  # noqa: E731
        while (queue := queue_of()) is None or queue["pending"] < burst:
            time.sleep(0.05)
        time.sleep(2.5)
        drainer = AsyncWorker(url, key, queue="queued", slots=200, wait_seconds=30)
        drained = {"n": 0, "at": 0.0}

        @drainer.handler("inc")
        async def inc_queued(ctx: Any, task_input: dict[str, Any]) -> dict[str, Any]:
            drained["n"] += 1
            if drained["n"] == burst:
                drained["at"] = time.perf_counter()
            return {"n": task_input.get("n", 0) + 1}

        def cpu_seconds(pid: int) -> float:
            """A process's CPU time so far (user + system), from /proc."""
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        cpu_before = (cpu_seconds(server.pid), cpu_seconds(os.getpid()))
        begun = time.perf_counter()
        threading.Thread(target=lambda: asyncio.run(drainer.run()), daemon=True).start()
        while drained["n"] < burst:
            time.sleep(0.001)
        queued = burst / (drained["at"] - begun)
        cpu_used = {
            "serve_s": round(cpu_seconds(server.pid) - cpu_before[0], 2),
            "worker_process_s": round(cpu_seconds(os.getpid()) - cpu_before[1], 2),
        }
        client.runs.wait(ids[-1], timeout=120)
        drainer.stop()
        results["throughput"] = {
            "runs": burst,
            "while_started_per_s": round(while_started, 1),
            "queued_then_drained_per_s": round(queued, 1),
            "queued_then_drained_cpu": cpu_used,
            "note": "handlers started per second by one AsyncWorker (200 slots)",
        }

        # Cancel to handler: the handler waits for its cancellation; time from the cancel call.
        cancel_worker = Worker(url, key, queue="cancel", slots=4, wait_seconds=30)
        seen: dict[str, float] = {}
        ready = threading.Event()

        @cancel_worker.handler("wait")
        def wait(ctx: Any, task_input: Any) -> Any:
            ready.set()
            while not ctx.is_cancelled:
                time.sleep(0.0005)
            seen[ctx.run_id] = time.perf_counter()
            ctx.check_cancelled()

        client.workflows.register("workflow: cancel-me\ntools:\n  wait:\n    worker: { queue: cancel }\n    effect: read\nsteps:\n  - id: call\n    tool: wait\n")
        threading.Thread(target=cancel_worker.run, daemon=True).start()
        cancel_times = []
        for _ in range(20 if QUICK else 50):
            ready.clear()
            run = client.runs.start("cancel-me", {})
            ready.wait(10)
            asked = time.perf_counter()
            client.runs.cancel(run["run_id"])
            deadline = time.time() + 10
            while run["run_id"] not in seen and time.time() < deadline:
                time.sleep(0.0005)
            cancel_times.append((seen[run["run_id"]] - asked) * 1000)
        results["cancel_to_handler_ms"] = summary(cancel_times)

        # An idle worker's requests: count its calls over a window.
        if not QUICK:
            count = {"n": 0}
            idle = Worker(url, key, queue="idle", slots=4)
            idle._http.event_hooks["request"].append(lambda request: count.__setitem__("n", count["n"] + 1))

            @idle.handler("nothing")
            def nothing(ctx: Any, task_input: Any) -> Any:
                return None

            threading.Thread(target=idle.run, daemon=True).start()
            time.sleep(61)
            results["idle_worker"] = {"seconds": 61, "requests": count["n"], "per_30s": round(count["n"] / 61 * 30, 2)}
            idle.stop()
        worker.stop()
        cancel_worker.stop()
    finally:
        if own_process is not None:
            own_process.terminate()
        server.terminate()
        server.wait(timeout=30)
        echo.shutdown()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
