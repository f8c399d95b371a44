"""An agent (a Rust ReAct loop in the engine) whose tool is a Python function: the model,
a fake server on loopback speaking OpenAI's chat-completions wire format, asks for the tool;
the call becomes a task a Python worker runs; the model gets its result and answers."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest

from stepwright import Client, Worker


class FakeOpenAi(BaseHTTPRequestHandler):
    """Asks for `summarise` first; once a tool result is in the conversation, answers with it."""

    requests: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        FakeOpenAi.requests.append(body)
        tool_results = [m for m in body["messages"] if m["role"] == "tool"]
        if tool_results:
            message = {"role": "assistant", "content": f"The summary is: {tool_results[-1]['content']}"}
            finish = "stop"
        else:
            call = {"id": "call_1", "type": "function", "function": {"name": "summarise", "arguments": json.dumps({"doc": "a long report about durable engines"})}}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        answer = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def model() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_an_agents_tool_is_a_python_function(server: Any, namespace: str, model: str) -> None:
    key = server.key(namespace)
    source = f"""
workflow: helper
models:
  fake: {{ provider: openai, model: gpt-test, base_url: "{model}", api_key_env: STEPWRIGHT_SDK_TEST_MODEL_KEY }}
tools:
  summarise:
    description: Summarise a document.
    worker: {{ queue: agents }}
    effect: read
    input: {{ type: object, required: [doc], properties: {{ doc: {{ type: string }} }} }}
agents:
  helper:
    model: fake
    instructions: Summarise with the tool, then answer.
    tools: [summarise]
    max_iterations: 3
steps:
  - id: answer
    agent: helper
    prompt: "Summarise the report."
"""
    seen: list[dict[str, Any]] = []
    with Client(server.url, key) as c:
        c.workflows.register(source)
        worker = Worker(server.url, key, queue="agents", wait_seconds=2)

        @worker.handler("summarise")
        def summarise(ctx: Any, task_input: dict[str, Any]) -> dict[str, Any]:
            seen.append({"step": ctx.step, "input": task_input})
            # Longer than the engine holds a run for an answer: the run suspends, and the
            # agent's step comes back to the call (its model turn served from the journal).
            time.sleep(2.5)
            return {"summary": task_input["doc"].split()[2].upper()}

        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        run = c.runs.start("helper", {})
        done = c.runs.wait(run["run_id"], timeout=30)
        worker.stop()
        thread.join(timeout=10)
        assert done["status"] == "completed", done
        assert seen == [{"step": "answer/turn.0/tool.0", "input": {"doc": "a long report about durable engines"}}], seen
        assert "REPORT" in json.dumps(done["output"]), done["output"]
        assert len(FakeOpenAi.requests) == 2, "the model was asked once per turn, never again after the suspension"
        tasks = c.tasks.list(run=run["run_id"])
        assert [(t["step"], t["state"]) for t in tasks] == [("answer/turn.0/tool.0", "completed")]
