#!/usr/bin/env bash
# The document generates clean clients with a common generator and no patches:
# openapi-python-client (pinned in python-client-requirements.txt) generates a client from
# docs/openapi.json with its default settings and no warnings, and that client — driving a
# real `stepwright serve` (the binary in $1) — parses every answer it gets and every run
# status. (openapi-typescript's output is checked in sdks/typescript/test.sh.)
set -euo pipefail
bin="$(realpath "$1")"
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
venv="${CARGO_TARGET_DIR:-$root/target}/openapi-python-client-$(sha256sum "$here/python-client-requirements.txt" | cut -c1-12)"
if [ ! -x "$venv/bin/openapi-python-client" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/python-client-requirements.txt"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The generator runs its post-hooks (ruff) from the venv.
out="$(cd "$work" && PATH="$venv/bin:$PATH" "$venv/bin/openapi-python-client" generate \
  --path "$root/docs/openapi.json" --meta none --output-path generated 2>&1)"
echo "$out"
if grep -qiE "warning|error" <<<"$out"; then
  echo "openapi-python-client reported problems with docs/openapi.json" >&2
  exit 1
fi
PYTHONPATH="$work" "$venv/bin/python" "$here/clients_check.py" "$bin"
