#!/usr/bin/env python3
"""The disk's floor for a durable commit: fsync of a 4 KiB append, 500 times, in DIR."""
import os
import sys
import time

directory = sys.argv[1] if len(sys.argv) > 1 else "."
path = os.path.join(directory, "fsync-floor.bin")
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
latencies = []
block = b"x" * 4096
for i in range(500):
    os.pwrite(fd, block, i * 4096)
    started = time.perf_counter()
    os.fsync(fd)
    latencies.append(time.perf_counter() - started)
os.close(fd)
os.unlink(path)
latencies.sort()
p50 = latencies[len(latencies) // 2] * 1000
p99 = latencies[int(len(latencies) * 0.99)] * 1000
print(f"fsync of a 4 KiB append: p50 {p50:.3f} ms, p99 {p99:.3f} ms")
