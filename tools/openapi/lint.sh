#!/usr/bin/env bash
# The committed OpenAPI document checked by two independent tools, pinned:
# openapi-spec-validator (PyPI) and Redocly's CLI (npm). Any error fails.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
venv="${CARGO_TARGET_DIR:-$root/target}/openapi-lint-venv"
if [ ! -x "$venv/bin/openapi-spec-validator" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
fi
"$venv/bin/openapi-spec-validator" "$root/docs/openapi.json"
( cd "$here" && npm ci --no-audit --no-fund --loglevel=error >/dev/null )
"$here/node_modules/.bin/redocly" lint --config "$here/redocly.yaml" "$root/docs/openapi.json"
