#!/usr/bin/env python3
"""Validates request bodies against the official SDKs' request types.

Usage: check_bodies.py DIR  (DIR/openai/*.json, DIR/anthropic/*.json, as the model layer's
`sdk_bodies` test writes them). Each body must validate as the SDK's `CompletionCreateParams`
/ `MessageCreateParams` (streaming or not, by its `stream` field), with unknown fields refused
at every level: every TypedDict of both SDKs is given pydantic's `extra="forbid"`, and
`Iterable` fields (which pydantic validates lazily) are drained. Exit status 1 on any failure.
"""
import importlib
import json
import pathlib
import pkgutil
import sys

import pydantic
import typing_extensions
from pydantic import ConfigDict, TypeAdapter

import anthropic
import anthropic.types
import openai
import openai.types


def forbid_unknown_fields(package):
    # The request types are TypedDicts; some unions also accept the SDK's response models
    # (pydantic models that keep unknown fields), so those are closed too.
    models = []
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if not isinstance(value, type):
                continue
            if typing_extensions.is_typeddict(value):
                value.__pydantic_config__ = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
            elif issubclass(value, pydantic.BaseModel) and value.__module__.startswith(package.__name__):
                value.model_config["extra"] = "forbid"
                models.append(value)
    for model in models:
        model.model_rebuild(force=True)


def drain(value):
    if isinstance(value, dict):
        return {key: drain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)) or hasattr(value, "__next__"):
        return [drain(item) for item in value]
    return value


def main(directory):
    forbid_unknown_fields(openai.types)
    forbid_unknown_fields(anthropic.types)
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming, MessageCreateParamsStreaming
    from openai.types.chat.completion_create_params import (
        CompletionCreateParamsNonStreaming,
        CompletionCreateParamsStreaming,
    )

    types = {
        "openai": (TypeAdapter(CompletionCreateParamsNonStreaming), TypeAdapter(CompletionCreateParamsStreaming)),
        "anthropic": (TypeAdapter(MessageCreateParamsNonStreaming), TypeAdapter(MessageCreateParamsStreaming)),
    }
    checked, failed = 0, []
    for provider, (whole, streamed) in types.items():
        files = sorted(pathlib.Path(directory, provider).glob("*.json"))
        if not files:
            failed.append(f"{provider}: no bodies in {directory}/{provider}")
        for path in files:
            body = json.loads(path.read_text())
            adapter = streamed if body.get("stream") else whole
            try:
                drain(adapter.validate_python(body))
                checked += 1
            except Exception as error:  # pydantic's ValidationError, or one from a drained iterable
                failed.append(f"{provider}/{path.name}: {error}")
    print(f"sdk check: openai {openai.__version__}, anthropic {anthropic.__version__}: "
          f"{checked} request bodies valid, {len(failed)} not")
    for failure in failed:
        print(f"  {failure}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
