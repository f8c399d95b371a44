"""Answers LiteLLM cannot script with `mock_response` on every route: a tool call, a cut-off
and a refused answer, and an overloaded provider, each whole and streamed. (`config.yaml`
names this handler.)"""

import litellm
from litellm import CustomLLM
from litellm.types.utils import ChatCompletionMessageToolCall, Choices, Function, Message, ModelResponse, Usage

CALL = {"id": "call_1", "name": "lookup_order", "arguments": '{"order_id": "A-42"}'}

# Structured output as each API asks for it: JSON text (OpenAI's `response_format`), or the
# input of the tool the request forces (Anthropic's way, named after the output format).
SHAPED = '{"city": "Paris", "population": 2100000}'


def _forced_tool(kwargs) -> str:
    tools = (kwargs.get("optional_params") or {}).get("tools") or []
    return tools[0]["function"]["name"] if tools else ""

SCRIPT = {
    "truncated": ("The answer goes on and on until it is cut", "length"),
    "refused": ("", "content_filter"),
}


def _scenario(model: str) -> str:
    return model.split("/")[-1]


def _overloaded_529(model: str):
    """Anthropic's own "overloaded" status, raised with its status code for the proxy to answer."""
    raise litellm.APIError(status_code=529, message="Overloaded", llm_provider="anthropic", model=model)


def _whole(model: str, forced: str = "") -> ModelResponse:
    scenario = _scenario(model)
    if scenario == "overloaded529":
        _overloaded_529(model)
    if scenario == "shaped":
        if forced:
            call = ChatCompletionMessageToolCall(id="call_s", type="function", function=Function(name=forced, arguments=SHAPED))
            message = Message(role="assistant", content=None, tool_calls=[call])
            finish = "tool_calls"
        else:
            message, finish = Message(role="assistant", content=SHAPED), "stop"
        return ModelResponse(
            model=scenario,
            choices=[Choices(index=0, finish_reason=finish, message=message)],
            usage=Usage(prompt_tokens=7, completion_tokens=9, total_tokens=16),
        )
    if scenario == "overloaded":
        raise litellm.ServiceUnavailableError(message="overloaded", llm_provider="scripted", model=model)
    if scenario == "calls":
        call = ChatCompletionMessageToolCall(
            id=CALL["id"], type="function", function=Function(name=CALL["name"], arguments=CALL["arguments"])
        )
        message = Message(role="assistant", content=None, tool_calls=[call])
        return ModelResponse(
            model=scenario,
            choices=[Choices(index=0, finish_reason="tool_calls", message=message)],
            usage=Usage(prompt_tokens=7, completion_tokens=9, total_tokens=16),
        )
    text, finish = SCRIPT[scenario]
    return ModelResponse(
        model=scenario,
        choices=[Choices(index=0, finish_reason=finish, message=Message(role="assistant", content=text))],
        usage=Usage(prompt_tokens=7, completion_tokens=9, total_tokens=16),
    )


def _chunks(model: str, forced: str = ""):
    scenario = _scenario(model)
    if scenario == "overloaded529":
        _overloaded_529(model)
    if scenario == "shaped":
        usage = {"prompt_tokens": 7, "completion_tokens": 9, "total_tokens": 16}
        if forced:
            tool_use = {"id": "call_s", "type": "function", "index": 0, "function": {"name": forced, "arguments": SHAPED}}
            yield {"text": "", "is_finished": False, "finish_reason": None, "usage": None, "index": 0, "tool_use": tool_use}
            yield {"text": "", "is_finished": True, "finish_reason": "tool_calls", "usage": usage, "index": 0, "tool_use": None}
        else:
            yield {"text": SHAPED, "is_finished": False, "finish_reason": None, "usage": None, "index": 0, "tool_use": None}
            yield {"text": "", "is_finished": True, "finish_reason": "stop", "usage": usage, "index": 0, "tool_use": None}
        return
    if scenario == "overloaded":
        raise litellm.ServiceUnavailableError(message="overloaded", llm_provider="scripted", model=model)
    if scenario == "calls":
        tool_use = {"id": CALL["id"], "type": "function", "index": 0,
                    "function": {"name": CALL["name"], "arguments": CALL["arguments"]}}
        yield {"text": "", "is_finished": False, "finish_reason": None, "usage": None, "index": 0,
               "tool_use": tool_use}
        yield {"text": "", "is_finished": True, "finish_reason": "tool_calls",
               "usage": {"prompt_tokens": 7, "completion_tokens": 9, "total_tokens": 16}, "index": 0,
               "tool_use": None}
        return
    text, finish = SCRIPT[scenario]
    words = text.split(" ") if text else []
    for i, word in enumerate(words):
        yield {"text": word + ("" if i == len(words) - 1 else " "), "is_finished": False, "finish_reason": None,
               "usage": None, "index": 0, "tool_use": None}
    yield {"text": "", "is_finished": True, "finish_reason": finish,
           "usage": {"prompt_tokens": 7, "completion_tokens": 9, "total_tokens": 16}, "index": 0, "tool_use": None}


class Scripted(CustomLLM):
    def completion(self, *args, **kwargs):
        return _whole(kwargs["model"], _forced_tool(kwargs))

    async def acompletion(self, *args, **kwargs):
        return _whole(kwargs["model"], _forced_tool(kwargs))

    def streaming(self, *args, **kwargs):
        yield from _chunks(kwargs["model"], _forced_tool(kwargs))

    async def astreaming(self, *args, **kwargs):
        for chunk in _chunks(kwargs["model"], _forced_tool(kwargs)):
            yield chunk


scripted = Scripted()
