"""The LanceDB memory store's MCP tools (OpenClaw's ``memory-lancedb`` names and arguments).

- ``memory_store`` {text, importance?, category?} -> ``{action: "created" | "updated", id, memory, ...}``
- ``memory_recall`` {query, limit?, minScore?, category?, mode?} -> ``{results: [...], note?}`` in the
  ``memory_search`` result shape (citation ``store:<id>``) plus each memory's fields
- ``memory_list`` {category?, limit?} -> ``{memories: [...], count}``
- ``memory_forget`` {memoryId} -> ``{action: "deleted", id, memory}``; or {query} -> the candidates
  (``action: "candidates"``), deleting nothing: a memory is forgotten by id only

:class:`StoreTools` opens the store (and imports ``lancedb``) on the first call, so a server whose
agent never uses these tools pays nothing for them. Kept out of ``mcp_server.py`` so that module
only lists and dispatches them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Annotated, Any, Literal

import mcp_types as types
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from memory_core.apps.mcp_schema import input_schema
from memory_core.config import Settings
from memory_core.notes import CATEGORIES, DEFAULT_IMPORTANCE
from memory_core.notes.memory_store import MAX_MEMORY_CHARS, MemoryStore

MAX_RECALL = 50
Category = Literal["preference", "fact", "decision", "entity", "other"]

STORE_DESCRIPTION = (
    "Save one lasting memory (a preference, fact, decision or entity worth keeping across sessions) in"
    " the structured memory store. A near-identical stored memory that says the same thing is updated"
    " instead of duplicated; one that says something else (another number, day, date, direction or word"
    " order, or a negation) is kept and the new one added beside it (keptSimilar). The answer says which (action 'created' or"
    " 'updated'). Secrets are redacted before storing."
)
RECALL_DESCRIPTION = (
    "Search the structured memory store (memories saved with memory_store) by meaning and words,"
    " optionally only some categories. Results carry the same 0-1 score as memory_search, ordered with"
    " importance and recency among comparable matches; each has the memory's id for memory_forget."
)
LIST_DESCRIPTION = "List stored memories (id, text, category, importance, createdAt), newest first."
FORGET_DESCRIPTION = (
    "Delete one stored memory by memoryId. Given a query instead, returns the candidate memories and"
    " deletes nothing: call again with the chosen memoryId."
)


# -- argument models: each validates a tool's arguments and produces its input schema (mcp_schema.py)

class StoreArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, max_length=MAX_MEMORY_CHARS, description="The memory, one self-contained statement.")
    importance: float | None = Field(default=None, ge=0, le=1, description=f"0-1 (default {DEFAULT_IMPORTANCE};"
                                                                          " an updated memory keeps its own).")
    category: Category | None = Field(default=None, description="Kind of memory (default other; an updated memory"
                                                                " keeps its own).")


class RecallArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1, max_length=4000)
    limit: int | None = Field(default=None, ge=1, le=MAX_RECALL,
                              validation_alias=AliasChoices("limit", "maxResults", "max_results"),
                              description="Most results (default query.max_results).")
    min_score: float | None = Field(default=None, ge=0, le=1, validation_alias=AliasChoices("minScore", "min_score"))
    # a list is asked to name one category at least; an empty one is taken as none (every category)
    category: Category | Annotated[list[Category], Field(json_schema_extra={"minItems": 1})] | None = Field(
        default=None, description="Only this category, or these.")
    mode: Literal["hybrid", "vector", "keyword"] | None = None


class ListArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"required": []})  # no field required, said so
    category: Category | None = None
    limit: int | None = Field(default=None, ge=1, le=10_000)


class ForgetArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"required": []})  # one of the two: _one
    memory_id: str | None = Field(default=None, min_length=1, max_length=64,
                                  validation_alias=AliasChoices("memoryId", "memory_id", "id"))
    query: str | None = Field(default=None, min_length=1, max_length=4000)

    @model_validator(mode="after")
    def _one(self) -> ForgetArgs:
        if (self.memory_id is None) == (self.query is None):
            raise ValueError("give memoryId (to delete) or query (to find candidates), not both or neither")
        return self


_MEMORY: dict[str, Any] = {
    "type": "object",
    "properties": {"id": {"type": "string"}, "text": {"type": "string"}, "importance": {"type": "number"},
                   "category": {"type": "string", "enum": list(CATEGORIES)}, "createdAt": {"type": "integer"},
                   "updatedAt": {"type": "integer"}},
    "required": ["id", "text", "importance", "category", "createdAt"],
}
STORE_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["created", "updated"]}, "id": {"type": "string"}, "memory": _MEMORY,
        "redacted": {"type": "boolean"},
        "similarity": {"type": "number", "description": "updated: the cosine with the memory it updated"},
        "previousText": {"type": "string", "description": "updated: the text it replaced"},
        "keptSimilar": {"type": "object", "description": "created beside a near-identical memory that says"
                                                         " something else (kept as it was)",
                        "properties": {"id": {"type": "string"}, "text": {"type": "string"},
                                       "similarity": {"type": "number"}}},
    },
    "required": ["action", "id", "memory"],
}
RECALL_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "results": {"type": "array", "items": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "startLine": {"type": "integer"},
                           "endLine": {"type": "integer"}, "score": {"type": "number"},
                           "snippet": {"type": "string"}, "source": {"type": "string"},
                           "citation": {"type": "string"}, "id": {"type": "string"}, "text": {"type": "string"},
                           "category": {"type": "string"}, "importance": {"type": "number"},
                           "createdAt": {"type": "integer"}},
            "required": ["path", "score", "citation", "id", "text"]}},
        "note": {"type": "string"},
    },
    "required": ["results"],
}
LIST_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"memories": {"type": "array", "items": _MEMORY}, "count": {"type": "integer"}},
    "required": ["memories", "count"],
}
FORGET_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["deleted", "candidates"]}, "id": {"type": "string"},
        "memory": _MEMORY, "deleted": {"type": "null"},
        "candidates": {"type": "array", "items": {"type": "object", "properties": {
            "id": {"type": "string"}, "text": {"type": "string"}, "score": {"type": "number"}}}},
    },
    "required": ["action"],
}


def store_tool_definitions() -> list[types.Tool]:
    write = types.ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                  open_world_hint=False)
    read = types.ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                                 open_world_hint=False)
    delete = types.ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False,
                                   open_world_hint=False)
    return [
        types.Tool(name="memory_store", title="Store a memory", description=STORE_DESCRIPTION, annotations=write,
                   output_schema=STORE_OUTPUT_SCHEMA,
                   input_schema=input_schema(StoreArgs)),
        types.Tool(name="memory_recall", title="Recall memories", description=RECALL_DESCRIPTION, annotations=read,
                   output_schema=RECALL_OUTPUT_SCHEMA,
                   input_schema=input_schema(RecallArgs)),
        types.Tool(name="memory_list", title="List memories", description=LIST_DESCRIPTION, annotations=read,
                   output_schema=LIST_OUTPUT_SCHEMA,
                   input_schema=input_schema(ListArgs)),
        types.Tool(name="memory_forget", title="Forget a memory", description=FORGET_DESCRIPTION,
                   annotations=delete, output_schema=FORGET_OUTPUT_SCHEMA,
                   input_schema=input_schema(ForgetArgs)),
    ]


class StoreTools:
    """The four tools over one lazily opened :class:`MemoryStore` (thread-safe).

    ``store``: one already open, closed with these tools. ``opener``: the store of an owner, asked
    at each call and never closed here: the MCP server's :class:`memory_core.api.Memory`, so the
    tools write the same instance ``memory_search`` and ``memory_get`` read."""

    def __init__(self, settings: Settings, store: MemoryStore | None = None, *,
                 opener: Callable[[], MemoryStore] | None = None) -> None:
        self.settings = settings
        self._store = store
        self._opener = opener
        self._lock = threading.Lock()

    @property
    def store(self) -> MemoryStore:
        if self._opener is not None:
            return self._opener()
        with self._lock:
            if self._store is None:
                self._store = MemoryStore(self.settings)
            return self._store

    def handlers(self) -> dict[str, Callable[[dict[str, Any]], dict[str, object]]]:
        return {"memory_store": self.store_memory, "memory_recall": self.recall, "memory_list": self.list,
                "memory_forget": self.forget}

    def store_memory(self, arguments: dict[str, Any]) -> dict[str, object]:
        a = StoreArgs.model_validate(arguments)
        return self.store.store(a.text, a.importance, a.category).to_dict()

    def recall(self, arguments: dict[str, Any]) -> dict[str, object]:
        a = RecallArgs.model_validate(arguments)
        cats = [a.category] if isinstance(a.category, str) else a.category
        rec = self.store.recall(a.query, max_results=a.limit, min_score=a.min_score, categories=cats, mode=a.mode)
        return {"results": [h.to_agent() for h in rec.hits], **({"note": rec.note} if rec.note else {})}

    def list(self, arguments: dict[str, Any]) -> dict[str, object]:
        a = ListArgs.model_validate(arguments)
        mems = self.store.list(a.category, a.limit)
        return {"memories": [m.to_dict() for m in mems], "count": len(mems)}

    def forget(self, arguments: dict[str, Any]) -> dict[str, object]:
        a = ForgetArgs.model_validate(arguments)
        if a.memory_id is None:
            rec = self.store.recall(a.query or "", max_results=5)
            return {"action": "candidates", "deleted": None,
                    "candidates": [{"id": h.memory.id, "text": h.memory.text, "score": round(h.score, 6)}
                                   for h in rec.hits]}
        return {"action": "deleted", "id": a.memory_id, "memory": self.store.forget(a.memory_id).to_dict()}

    def get(self, citation: str) -> dict[str, object]:
        """``memory_get`` of a ``store:<id>`` citation: the memory's text."""
        return self.store.read_citation(citation).to_dict()

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
