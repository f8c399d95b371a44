#!/usr/bin/env bash
# The request bodies the model adapters send, validated against the official SDKs' request
# types (pinned, from PyPI): the model layer's `sdk_bodies` test captures them off the wire
# into a directory, then check_bodies.py validates each one with unknown fields refused.
# Usage: tools/sdk/check.sh   (from the repository root; CARGO_TARGET_DIR is honoured)
set -euo pipefail
cd "$(dirname "$0")/../.."
OPENAI_VERSION="3.54.0"
ANTHROPIC_VERSION="2.12.0"
VENV="${CARGO_TARGET_DIR:-target}/sdk-check-openai-$OPENAI_VERSION-anthropic-$ANTHROPIC_VERSION"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check \
    "openai==$OPENAI_VERSION" "anthropic==$ANTHROPIC_VERSION"
fi
bodies="$(mktemp -d)"
trap 'rm -rf "$bodies"' EXIT
STEPWRIGHT_SDK_BODIES="$bodies" cargo test -q -p stepwright-llm --test it sdk_bodies >/dev/null
"$VENV/bin/python" tools/sdk/check_bodies.py "$bodies"
