"""Each MCP tool's input is declared once: its pydantic argument model validates the call and
produces the input schema the tool lists (memory_core/apps/mcp_schema.py).

tests/mcp_input_schemas.json holds the schemas the tools listed while they were written by hand
(captured from that code, for default settings, for other query settings and for a server of
several agents): what clients see must not change when the model produces it. (One deliberate change
since: memory_search's minScore description says what the default threshold applies to, issue 37.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from pydantic import BaseModel, ValidationError

from memory_core.apps.mcp_schema import input_schema
from memory_core.apps.mcp_server import (
    GetArgs,
    SearchArgs,
    StatusArgs,
    WriteArgs,
    _search_schema_values,
    build_server,
    tool_definitions,
)
from memory_core.apps.mcp_store_tools import ForgetArgs, ListArgs, RecallArgs, StoreArgs
from memory_core.config import Settings, load_settings

SNAPSHOT = json.loads((Path(__file__).parent / "mcp_input_schemas.json").read_text(encoding="utf-8"))
MODELS: dict[str, type[BaseModel]] = {
    "memory_search": SearchArgs, "memory_get": GetArgs, "memory_status": StatusArgs, "memory_write": WriteArgs,
    "memory_store": StoreArgs, "memory_recall": RecallArgs, "memory_list": ListArgs, "memory_forget": ForgetArgs,
}


def _varied() -> Settings:
    return load_settings(None, {"workspace": "/tmp/x", "provider": "none",
                                "query": {"max_results": 9, "min_score": 0.3, "result_floor": 0.05}})


def _listed(tools: list[Any]) -> dict[str, Any]:
    return json.loads(json.dumps({t.name: t.input_schema for t in tools}))


@pytest.mark.parametrize(("case", "defs"), [
    ("default", lambda: tool_definitions(Settings())),
    ("varied", lambda: tool_definitions(_varied())),
    ("agents_default", lambda: tool_definitions(Settings(), ["a", "b"], "a")),
    ("agents_no_default", lambda: tool_definitions(Settings(), ["a", "b"], None)),
])
def test_the_schemas_clients_see_are_the_hand_written_ones(case: str, defs: Any) -> None:
    assert _listed(defs()) == SNAPSHOT[case]


def _run(fn: Any) -> Any:
    async def guarded() -> Any:
        with anyio.fail_after(30):
            return await fn()

    return anyio.run(guarded)


def _sample(prop: dict[str, Any]) -> Any:
    """A value a property's schema allows."""
    if "anyOf" in prop:
        return _sample(prop["anyOf"][-1])
    if "enum" in prop:
        return prop["enum"][-1]
    kind = prop["type"]
    if kind == "string":
        return "x" * max(prop.get("minLength", 1), 1)
    if kind == "integer":
        return prop.get("maximum", prop.get("minimum", 1))
    if kind == "number":
        return prop.get("maximum", 0.5)
    assert kind == "array", prop
    return [_sample(prop["items"])]


def test_listed_input_schemas_come_from_the_models_that_validate_the_calls(workspace: Path) -> None:
    settings = load_settings(None, {"workspace": str(workspace), "provider": "none",
                                    "query": {"max_results": 11}})
    server, tools = build_server(settings)

    async def listed() -> dict[str, Any]:
        async with Client(server) as client:
            return _listed((await client.list_tools()).tools)

    try:
        schemas = _run(listed)
    finally:
        tools.close()
    assert set(schemas) == set(MODELS)
    for name, model in MODELS.items():
        values = _search_schema_values(settings) if name == "memory_search" else None
        assert schemas[name] == input_schema(model, values), name
    assert "default 11;" in schemas["memory_search"]["properties"]["maxResults"]["description"]
    # every name a schema lists, the model takes (aliases included); one it does not list, it refuses
    for name, model in MODELS.items():
        schema = schemas[name]
        base = {p: _sample(schema["properties"][p]) for p in schema.get("required", [])}
        if name == "memory_forget":
            base = {"query": "x"}
        model.model_validate(base)
        for prop, spec in schema["properties"].items():
            if name == "memory_forget" and prop == "memoryId":
                model.model_validate({"memoryId": _sample(spec)})
            else:
                model.model_validate({**base, prop: _sample(spec)})
        with pytest.raises(ValidationError):
            model.model_validate({**base, "notListed": 1})


@pytest.mark.parametrize(("tool", "arguments", "says"), [
    ("memory_search", {"query": ""}, "memory_search: invalid arguments: query: String should have at least 1 character"),
    ("memory_search", {"query": "x", "maxResults": 0}, "memory_search: invalid arguments: maxResults: "),
    ("memory_get", {"path": "MEMORY.md", "lines": 0}, "memory_get: invalid arguments: lines: "),
    ("memory_recall", {"query": "x", "limit": 51}, "memory_recall: invalid arguments: limit: "),
    ("memory_status", {"verbose": True}, "memory_status: invalid arguments: verbose: unknown argument"),
])
def test_a_bad_input_gets_one_clear_error(workspace: Path, tool: str, arguments: dict[str, Any], says: str) -> None:
    settings = load_settings(None, {"workspace": str(workspace), "provider": "none"})
    server, tools = build_server(settings)

    async def call() -> Any:
        async with Client(server) as client:
            return await client.call_tool(tool, arguments)

    try:
        res = _run(call)
    finally:
        tools.close()
    assert res.is_error
    assert len(res.content) == 1
    text = res.content[0].text
    assert text.startswith(says), text
    assert "\n" not in text and "Traceback" not in text
