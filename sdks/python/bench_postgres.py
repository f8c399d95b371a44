"""Cross-process step tasks on Postgres: two `stepwright serve` on one database, runs started
through one, the worker polling the other; prints the task's dispatch-to-handler latency and
a run's end-to-end time. `python sdks/python/bench_postgres.py target/release/stepwright`
(Postgres at 127.0.0.1:5432, `psql` on the PATH; a schema of its own, dropped after)."""

import json, subprocess, sys, time, uuid, threading, socket, statistics
import httpx
from stepwright import Client, Worker
BIN=sys.argv[1]; DB="postgres://postgres@127.0.0.1:5432/test"
schema=f"sw_diag_{uuid.uuid4().hex[:8]}"
subprocess.run(["psql",DB,"-q","-c",f"CREATE SCHEMA {schema}"],check=True)
db=f"{DB}?options=-c%20search_path%3D{schema}"
ports=[]; procs=[]
for _ in range(2):
    s=socket.socket(); s.bind(("127.0.0.1",0)); p=s.getsockname()[1]; s.close(); ports.append(p)
    procs.append(subprocess.Popen([BIN,"--db",db,"serve","--listen",f"127.0.0.1:{p}"],stderr=subprocess.DEVNULL))
time.sleep(2)
key=json.loads(subprocess.run([BIN,"--db",db,"keys","create","--namespace","d","--user","d","--role","admin","--role","worker","--json"],capture_output=True,text=True,check=True).stdout)["secret"]
A,B=[f"http://127.0.0.1:{p}" for p in ports]
c=Client(A,key)
c.workflows.register("workflow: x\ntools:\n  t:\n    worker: { queue: q }\n    effect: read\nsteps:\n  - id: s\n    tool: t\n")
w=Worker(B,key,queue="q",slots=4)
started={}
@w.handler("t")
def t(ctx,i):
    started[ctx.task_id]=time.time(); return 1
threading.Thread(target=w.run,daemon=True).start(); time.sleep(0.5)
times=[]
for _ in range(100):
    b=time.perf_counter(); r=c._request("POST","/v1/runs",json={"workflow":"x","input":{},"wait_seconds":10}); assert r["status"]=="completed",r
    times.append((time.perf_counter()-b)*1000)
tasks=c.tasks.list(limit=200)
lat=sorted((started[x["id"]]*1e6-x["created_at"])/1000 for x in tasks if x["id"] in started)
print("cross-process dispatch->handler p50 %.2f ms p99 %.2f ms; run end-to-end p50 %.2f ms" % (lat[len(lat)//2], lat[int(len(lat)*0.99)], sorted(times)[50]))
w.stop()
for p in procs: p.terminate()
subprocess.run(["psql",DB,"-q","-c",f"DROP SCHEMA {schema} CASCADE"])
