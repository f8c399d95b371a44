#!/usr/bin/env bash
# The Python package's checks: installed into a fresh venv as a user installs it (`pip
# install ./sdks/python`, no compiler), its types checked (`mypy --strict`), and its tests run
# against a real `stepwright serve` (the binary in $1). Test tools pinned in
# requirements-test.txt.
set -euo pipefail
bin="$(realpath "$1")"
here="$(cd "$(dirname "$0")" && pwd)"
venv="${SDK_VENV:-${CARGO_TARGET_DIR:-$here/../../target}/sdk-python-$(sha256sum "$here/requirements-test.txt" | cut -c1-12)}"
if [ ! -x "$venv/bin/pytest" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements-test.txt"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "$here"
( cd "$here" && "$venv/bin/mypy" --strict stepwright )
# The tests import the installed package, not the source tree.
( cd "$here/tests" && STEPWRIGHT_BIN="$bin" "$venv/bin/python" -m pytest -q -p no:cacheprovider . )
# The example, offline from its cassette, as its README runs it.
( cd "$here/../.." && STEPWRIGHT_BIN="$bin" env -u OPENAI_API_KEY "$venv/bin/python" examples/python-worker/main.py >/dev/null )
