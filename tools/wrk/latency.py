#!/usr/bin/env python3
# Usage: latency.py BASE_URL API_KEY [RUNS]
# Against a running `stepwright serve` with docs/api/hello-approval.yaml registered:
# for each run, starts it (it waits for an approval), opens its event stream, decides the
# approval over HTTP and reads the stream to its end. Prints
#  - approval → next step started: the `at` of the `sent` step's start minus the wall time
#    just before the decision was sent (both this machine's clock);
#  - an event on the wire: the time each event arrived minus its `at` (recorded just before
#    its commit, so this is commit + feed + wire).
import http.client, json, socket, sys, threading, time, urllib.parse

base, key = sys.argv[1], sys.argv[2]
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 50
url = urllib.parse.urlparse(base)
headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}

def call(method, path, body=None):
    conn = http.client.HTTPConnection(url.hostname, url.port)
    conn.request(method, path, json.dumps(body) if body is not None else None, headers)
    response = conn.getresponse()
    data = json.loads(response.read() or b"null")
    conn.close()
    return response.status, data

def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]

decide_to_next, on_wire = [], []
for _ in range(runs):
    status, run = call("POST", "/v1/runs", {"workflow": "hello-approval", "input": {"name": "Ada"}, "wait_seconds": 10})
    assert status == 201 and run["status"] == "suspended", (status, run)
    sock = socket.create_connection((url.hostname, url.port))
    # HTTP/1.0: no chunked framing between the lines, and the end of the stream closes it.
    sock.sendall(f"GET /v1/runs/{run['run_id']}/events HTTP/1.0\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
    sock.settimeout(10)
    buffer = b""
    # Read what is there so far (up to the interrupt.opened event).
    while b"event: interrupt.opened" not in buffer:
        buffer += sock.recv(65536)
    # A reader thread notes when each event arrives, while this thread sends the decision
    # (read after the decision's answer instead, an event would wait on the request).
    arrivals = []
    def read_to_end():
        pending = buffer.split(b"event: interrupt.opened", 1)[1]
        pending = pending.split(b"\n\n", 1)[1] if b"\n\n" in pending else b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return
            arrived = time.time()
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.startswith(b"data: "):
                    event = json.loads(line[6:])
                    arrivals.append((arrived, event))
                    if event["kind"] == "run.completed":
                        return
    reader = threading.Thread(target=read_to_end)
    reader.start()
    t0 = time.time()
    status, _ = call("POST", f"/v1/interrupts/{run['run_id']}.{run['pending'][0]['id']}/decision", {"decision": "approve"})
    assert status == 200, status
    reader.join()
    sent_started = None
    for arrived, event in arrivals:
        on_wire.append((arrived - event["at"] / 1e6) * 1000)
        if event["kind"] == "step.started" and event["path"] == "sent":
            sent_started = event["at"] / 1e6
    sock.close()
    decide_to_next.append((sent_started - t0) * 1000)

print(f"runs={runs}")
print(f"approval -> next step started: p50 {pct(decide_to_next, 50):.2f} ms, p99 {pct(decide_to_next, 99):.2f} ms")
print(f"event on the wire after its record: p50 {pct(on_wire, 50):.2f} ms, p99 {pct(on_wire, 99):.2f} ms ({len(on_wire)} events)")
