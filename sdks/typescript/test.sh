#!/usr/bin/env bash
# The TypeScript package's checks: its API types regenerated from docs/openapi.json by
# openapi-typescript (pinned) and compared with the committed api.d.ts; its types checked
# with tsc; installed into an empty project as a user installs it (`npm install
# ./sdks/typescript`, no build step) and imported; its tests run with node's test runner
# against a real `stepwright serve` (the binary in $1).
set -euo pipefail
bin="$(realpath "$1")"
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"
npm ci --no-audit --no-fund --loglevel=error >/dev/null
fresh="$(mktemp -d)"
trap 'rm -rf "$fresh"' EXIT
npx openapi-typescript ../../docs/openapi.json -o "$fresh/api.d.ts" >/dev/null 2>&1
if ! diff -q api.d.ts "$fresh/api.d.ts" >/dev/null; then
  echo "sdks/typescript/api.d.ts is stale: run \`npm run generate\` in sdks/typescript" >&2
  exit 1
fi
npx tsc -p tsconfig.json
( cd "$fresh" && npm init -y >/dev/null && npm install --no-audit --no-fund --loglevel=error "$here" >/dev/null && \
  node --input-type=module -e 'import { Client, Worker } from "@stepwright/sdk"; if (typeof Client !== "function" || typeof Worker !== "function") process.exit(1);' )
STEPWRIGHT_BIN="$bin" node --test test/*.test.mjs
# The example, offline from its cassette, as its README runs it.
( cd "$here/../../examples/typescript-worker" && npm install --no-audit --no-fund --loglevel=error >/dev/null && \
  STEPWRIGHT_BIN="$bin" env -u OPENAI_API_KEY node main.mjs >/dev/null )
