"""Writes ``stepwright/models.py``: every schema of ``docs/openapi.json`` as a ``TypedDict``
(or a ``Literal`` for an enum), so the clients' answers are typed without a runtime
dependency. Run from the repository root after the document changes:

    python sdks/python/tools/generate_models.py            # writes the file
    python sdks/python/tools/generate_models.py --check    # fails if it is stale

Stdlib only. Python 3.10 has no ``NotRequired``: a schema with optional fields becomes a base
class of its required fields and a ``total=False`` class of the rest.
"""

from __future__ import annotations

import json
import keyword
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
DOCUMENT = ROOT / "docs" / "openapi.json"
TARGET = ROOT / "sdks" / "python" / "stepwright" / "models.py"


def ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[1]


def annotation(schema: dict[str, Any]) -> str:
    """The Python type of a schema (quoted names resolve lazily: the module uses
    ``from __future__ import annotations``)."""
    if "$ref" in schema:
        return ref_name(schema["$ref"])
    for union in ("anyOf", "oneOf"):
        if union in schema:
            parts = [annotation(s) for s in schema[union]]
            return " | ".join(dict.fromkeys(parts))
    if "enum" in schema:
        return "Literal[" + ", ".join(json.dumps(v) for v in schema["enum"]) + "]"
    kind = schema.get("type")
    if isinstance(kind, list):
        parts = [annotation({**schema, "type": k}) for k in kind]
        return " | ".join(dict.fromkeys(parts))
    if kind == "string":
        return "str"
    if kind == "integer":
        return "int"
    if kind == "number":
        return "float"
    if kind == "boolean":
        return "bool"
    if kind == "null":
        return "None"
    if kind == "array":
        return f"list[{annotation(schema.get('items', {}))}]"
    if kind == "object":
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict) and not schema.get("properties"):
            return f"dict[str, {annotation(extra)}]"
        return "dict[str, Any]"
    return "Any"


def doc(text: str | None, indent: str) -> list[str]:
    if not text:
        return []
    lines = text.replace('"""', "'''").replace("\\", "\\\\").strip().splitlines()
    if len(lines) == 1:
        return [f'{indent}"""{lines[0]}"""']
    return [f'{indent}"""{lines[0]}', *[f"{indent}{line}".rstrip() for line in lines[1:]], f'{indent}"""']


def typed_dict(name: str, schema: dict[str, Any]) -> list[str]:
    properties: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))
    awkward = [p for p in properties if not p.isidentifier() or keyword.iskeyword(p)]
    out: list[str] = []
    if awkward:
        # Field names Python cannot spell as attributes: the functional form.
        fields = ", ".join(f"{json.dumps(p)}: {annotation(s)}" for p, s in properties.items())
        out.append(f"{name} = TypedDict({json.dumps(name)}, {{{fields}}}, total=False)")
        return out
    must = [p for p in properties if p in required]
    may = [p for p in properties if p not in required]

    def body(fields: list[str]) -> list[str]:
        lines: list[str] = []
        for field in fields:
            lines.append(f"    {field}: {annotation(properties[field])}")
            lines += doc(properties[field].get("description"), "    ")
        return lines or ["    pass"]

    if must and may:
        out.append(f"class _{name}Required(TypedDict):")
        out += body(must)
        out += ["", ""]
        out.append(f"class {name}(_{name}Required, total=False):")
        out += doc(schema.get("description"), "    ")
        out += body(may)
    else:
        out.append(f"class {name}(TypedDict{'' if must else ', total=False'}):")
        out += doc(schema.get("description"), "    ")
        out += body(must or may)
    return out


def render(document: dict[str, Any]) -> str:
    schemas: dict[str, Any] = document["components"]["schemas"]
    lines = [
        '"""The API\'s types, generated from ``docs/openapi.json`` by',
        "``sdks/python/tools/generate_models.py``; do not edit by hand.\"\"\"",
        "",
        "from __future__ import annotations",
        "",
        "from typing import Any, Literal, TypedDict, Union",
        "",
        "__all__ = [",
        *[f"    {json.dumps(name)}," for name in sorted(schemas)],
        "]",
        "",
    ]
    # Enums first and unions last: an alias is evaluated when the module loads, so what it
    # names must exist by then (a class's annotations are read lazily).
    def rank(name: str) -> int:
        schema = schemas[name]
        if "enum" in schema:
            return 0
        return 1 if schema.get("type") == "object" and "properties" in schema else 2

    for name in sorted(schemas, key=lambda n: (rank(n), n)):
        schema = schemas[name]
        lines += ["", ""]
        if rank(name) == 0:
            lines.append(f"{name} = {annotation(schema)}")
            lines += doc(schema.get("description"), "")
        elif rank(name) == 1:
            lines += typed_dict(name, schema)
        else:
            # A union (an event, a view of several shapes): its members' types.
            lines.append(f"{name} = Union[{annotation(schema).replace(' | ', ', ')}]")
            lines += doc(schema.get("description"), "")
    return "\n".join(lines) + "\n"


def main() -> None:
    text = render(json.loads(DOCUMENT.read_text()))
    if "--check" in sys.argv:
        if TARGET.read_text() != text:
            sys.exit(f"{TARGET} is stale: run python sdks/python/tools/generate_models.py")
        return
    TARGET.write_text(text)


if __name__ == "__main__":
    main()
