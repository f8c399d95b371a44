#!/usr/bin/env bash
# The OpenAPI document exercised by an independent tool: schemathesis (pinned, from PyPI)
# generates requests from the document against a live `stepwright serve` and fails on any
# 5xx, any response that violates the document (schema, status code, content type,
# headers). Usage: tools/schemathesis.sh PATH/TO/stepwright
set -euo pipefail
BIN="$(realpath "$1")"
here="$(cd "$(dirname "$0")" && pwd)"
SCHEMATHESIS_VERSION="4.32.5"
VENV="${CARGO_TARGET_DIR:-target}/schemathesis-$SCHEMATHESIS_VERSION"
if [ ! -x "$VENV/bin/st" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi
work="$(mktemp -d)"
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$work"
db="sqlite://$work/api.db"
# The key has no `worker` role: a worker's claim is a long poll (up to 60 s, past the request
# timeout), so the task endpoints answer it 403 here; their answers are checked by the
# packages' tests (sdks/*/test.sh) and the generated client (tools/openapi/clients.sh).
key="$("$BIN" --db "$db" keys create --namespace acme --user ann --role admin --role operator --role approver 2>/dev/null)"
"$BIN" --db "$db" serve --listen 127.0.0.1:0 2> serve.log &
server=$!
for _ in $(seq 1 100); do grep -q 'http://' serve.log && break; sleep 0.1; done
base="$(sed -n 's|.*\(http://[0-9.:]*\)/v1.*|\1|p' serve.log | head -n 1)"
# A workflow to start, so that runs and their events have data (runs that finish: their
# event streams end, as schemathesis needs; approvals are the end-to-end tests' to prove).
python3 - "$base" "$key" <<'PY'
import json, sys, urllib.request
base, key = sys.argv[1], sys.argv[2]
source = """workflow: greet
steps:
  - id: hello
    set: "{{ 'Hello, ' ~ (input.name | default('you')) }}"
  - id: shout
    set: "{{ steps.hello.output ~ '!' }}"
"""
def post(path, body):
    request = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(request))
post("/v1/workflows", {"source": source})
# Schedules, so that their listing and details have data (hourly: no run starts meanwhile).
post("/v1/workflows", {"source": """workflow: hourly
schedules:
  report: { every: 1h, input: { at: "{{ tick.at }}" } }
steps:
  - id: note
    set: "{{ input.at | default('now') }}"
"""})
post("/v1/schedules", {"workflow": "hourly"})
# A trigger and events, so that their listings, details and histories have data.
post("/v1/workflows", {"source": """workflow: tickets
triggers:
  each: { event: "ticket.*", input: { id: "{{ event.payload.id | default(0) }}" } }
steps:
  - id: note
    set: "{{ input.id }}"
"""})
post("/v1/triggers", {"workflow": "tickets"})
for n in range(3):
    post("/v1/events", {"name": "ticket.created", "payload": {"id": n}, "idempotency_key": "t-%d" % n})
for _ in range(3):
    post("/v1/runs", {"workflow": "greet", "input": {"name": "Ada"}, "wait_seconds": 5})
PY
# Every phase, positive and negative data, every check but those tools/schemathesis.toml
# says why it leaves out.
"$VENV/bin/st" --config-file "$here/schemathesis.toml" run "$base/v1/openapi.json" \
  -H "Authorization: Bearer $key" \
  --mode all \
  --max-examples 50 --seed 1 --request-timeout 10
