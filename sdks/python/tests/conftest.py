"""A real `stepwright serve` on a fresh SQLite store (or the Postgres database in
`STEPWRIGHT_TEST_DATABASE_URL` when `STEPWRIGHT_SDK_STORE=postgres`), and a key of its own
namespace for each test."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Iterator

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[3]
PUSH_SECRET = "push-secret"
BIN = os.environ.get("STEPWRIGHT_BIN", str(ROOT / "target" / "debug" / "stepwright"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, db: str, url: str, process: subprocess.Popen[bytes]) -> None:
        self.db = db
        self.url = url
        self.process = process

    def key(self, namespace: str, *roles: str) -> str:
        args = [BIN, "--db", self.db, "keys", "create", "--namespace", namespace, "--user", "tester", "--json"]
        for role in roles or ("admin", "worker"):
            args += ["--role", role]
        out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
        return str(json.loads(out)["secret"])


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    db = f"sqlite://{tmp_path_factory.mktemp('store') / 'sdk.db'}"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(tmp_path_factory.mktemp("log") / "serve.log", "wb")
    env = dict(os.environ, STEPWRIGHT_SDK_TEST_MODEL_KEY="test-key", STEPWRIGHT_SDK_TEST_PUSH_SECRET=PUSH_SECRET)
    process = subprocess.Popen(
        [BIN, "--db", db, "serve", "--listen", f"127.0.0.1:{port}", "--webhook-allow", "127.0.0.0/8"], stdout=log, stderr=log, env=env
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{url}/v1/health", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError("stepwright serve did not start")
        time.sleep(0.05)
    yield Server(db, url, process)
    process.terminate()
    process.wait(timeout=30)


@pytest.fixture
def namespace(request: pytest.FixtureRequest) -> str:
    """A namespace of the test's own, so tests share nothing."""
    return f"{request.node.name.replace('_', '-')[:40]}-{uuid.uuid4().hex[:6]}"
