"""A worker process for tests that kill workers: its handler appends a line to a file (so
the test counts how often it ran), then sleeps for as long as the input says."""

import json
import sys
import time

from stepwright import Worker

url, key, queue, calls = sys.argv[1:5]
worker = Worker(url, key, queue=queue, slots=1, wait_seconds=1)


@worker.handler("slow")
def slow(ctx, task_input):
    # A checkpoint for the next attempt, sent with the next heartbeat.
    ctx.heartbeat({"from_attempt": ctx.attempt})
    with open(calls, "a") as f:
        f.write(f"{ctx.task_id} {ctx.attempt} {json.dumps(ctx.details)}\n")
    time.sleep(task_input.get("sleep", 0))
    return {"done_by": sys.argv[5] if len(sys.argv) > 5 else "worker", "attempt": ctx.attempt}


worker.run()
