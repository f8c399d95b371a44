#!/usr/bin/env python3
# Usage: sse_idle.py HOST PORT RUN_ID API_KEY N (HOLD=seconds to hold them, default 5).
# Opens N idle SSE connections to one waiting run's event stream and holds them.
import socket, sys, time, os
host, port, run, key, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
req = f"GET /v1/runs/{run}/events HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\nAccept: text/event-stream\r\n\r\n".encode()
socks = []
for i in range(n):
    s = socket.create_connection((host, port))
    s.sendall(req)
    socks.append(s)
ok = 0
for s in socks:
    s.settimeout(10)
    data = s.recv(4096)
    if b"200 OK" in data: ok += 1
print(f"open={len(socks)} answered_200={ok}", flush=True)
time.sleep(float(os.environ.get("HOLD", "5")))
