"""``memory-core mcp``: the index as Model Context Protocol tools, with the official MCP SDK.

Three read-only tools over one :class:`memory_core.api.Memory` (the front door the CLI uses too,
so settings, answers and freshness are the same everywhere), and one that writes:

- ``memory_search`` (query, maxResults, minScore, sources, mode; snake_case aliases): ranked
  snippets with citations, in OpenClaw's result shape (``Memory.answer``), saying when the index
  it was read from is stale (``stale``);
- ``memory_get`` (path or citation, from, lines) -> ``{path, text}``: lines of an indexed file,
  with the CLI's path guard;
- ``memory_status``: what the index holds and how search runs;
- ``memory_write`` (text, path): append a note to today's daily note (or MEMORY.md) and index it
  at once (memory_core/notes/write.py);

and the ``memory_flush`` prompt: the two prompts of the memory flush before compaction
(memory_core/notes/flush.py).

The server uses the SDK's low-level :class:`mcp.server.lowlevel.Server` so the tool schemas
are exactly what an agent sees (``memory_get`` takes ``from``, a Python keyword) and every
failure is a tool result with ``isError`` set and a one-line message, never a crash.

The searcher reads the live index read-only and reopens it when a reindex swaps a new file
in, so the server needs no restart and never waits for a run (runs write a temp file and
rename it). Tool calls run in a worker thread so the event loop keeps answering (pings,
other sessions over HTTP); they are serialised on one lock because a searcher closes its
old connection when it reopens the file, which must not happen under another query.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from importlib import metadata
from typing import TYPE_CHECKING, Any, Literal, cast

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.lowlevel import Server
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from memory_core.api import Memory
from memory_core.apps.mcp_schema import input_schema, list_alias_choices
from memory_core.apps.mcp_store_tools import StoreTools, store_tool_definitions
from memory_core.config import SNIPPET_MAX_CHARS, Settings
from memory_core.errors import MemoryCoreError, PathError, RunError, UsageError
from memory_core.notes.write import MAX_WRITE_CHARS, write_memory
from memory_core.query.answers import MAX_RESULTS
from memory_core.query.backends import open_searcher
from memory_core.query.reading import MAX_GET_CHARS
from memory_core.query.search import AGENT_RESULT_KEYS, MAX_GET_LINES, MODES, Searcher
from memory_core.runtime.sync import SyncManager

if TYPE_CHECKING:
    from mcp.server.context import CallNext, HandlerResult
    from starlette.applications import Starlette

log = logging.getLogger("memory_core.mcp")

SERVER_NAME = "memory-core"
MAX_SEARCH_RESULTS = MAX_RESULTS  # more asked for is clamped to this, not refused
MAX_QUERY_CHARS = 4000
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
MAX_CONCURRENT_CALLS = 4  # searchers open at once: the calls answered side by side
WRITE_REINDEX_DEADLINE_S = 20.0  # memory_write answers by then; its reindex may go on in the background

INSTRUCTIONS = (
    "Long-term memory of this agent and its user: Markdown notes (MEMORY.md, memory/*.md) and, when"
    " indexed, past chat transcripts. Before answering anything about prior work, decisions, dates,"
    " people, preferences or todos, call memory_search first. If a snippet is not enough, call"
    " memory_get for just the cited lines (plus a little context), not whole files. Cite what you use"
    " as path#Lstart-Lend. Call memory_status when search fails or finds nothing unexpectedly. When"
    " the user asks you to remember something, or a decision, preference or fact is worth keeping, write"
    " it down with memory_write."
)

SEARCH_DESCRIPTION = (
    "Search long-term memory (Markdown notes and, if indexed, past chat transcripts) with hybrid"
    " keyword + semantic search. Use this FIRST whenever a question may depend on earlier work,"
    " decisions, dates, people, preferences or todos. Returns the best-matching snippets, each with"
    " path, startLine/endLine, score (0-1: how well it matches, whatever else was found), match"
    f" (keyword, vector, both, or date: found for the day the query names), date, source and a citation"
    f" 'path#Lstart-Lend' (snippets of at most {SNIPPET_MAX_CHARS} characters), with the provider and model that"
    " embedded the query and any fallback. Name the day in the query when it matters ('on 17 January',"
    " 'last weekend', 'between 12 and 16 March', 'our first conversation'): what was written then ranks first."
    " In a group or channel chat pass chatType so citations stay out of the reply. If a snippet"
    " is not enough, call memory_get with that path and line range instead of reading whole files."
    " No results means nothing in memory matches well (nothing reached minScore). The index refreshes"
    " itself; stale: true means recent file changes may not be in it yet (note says why)."
)

GET_DESCRIPTION = (
    "Read specific lines of one memory file, normally right after memory_search. Pass a path from a"
    " search result and only the lines you need: from=start_line and lines=end_line-start_line+1 (add"
    " a few lines of context if needed). Only files in the index can be read; any other path is"
    f" refused. Returns at most {MAX_GET_LINES} lines and {MAX_GET_CHARS:,} characters (whole lines; a note says where to go on); transcripts come back as readable, redacted text."
)

STATUS_DESCRIPTION = (
    "Report whether the memory index exists and what it holds: state (ok, missing, damaged, or newer: written by a newer memory-core), file"
    " and chunk counts per source, embedding provider and model, whether vector search is on, and"
    " when it was built (built_at, ms since the epoch). Use it when memory_search errors or finds"
    " nothing unexpectedly; not needed before normal searches."
)


# -- argument models: each validates a tool's arguments and produces its input schema ------------
# (memory_core/apps/mcp_schema.py; a description's {name} is filled from the server's settings)

class SearchArgs(BaseModel):
    """OpenClaw's names (``maxResults``, ``minScore``) with snake_case aliases."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=list_alias_choices)

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS,
                       description="What to recall, in natural language or keywords.")
    max_results: int | None = Field(  # above MAX_SEARCH_RESULTS: clamped by the searcher
        default=None, ge=1, validation_alias=AliasChoices("maxResults", "max_results"),
        description=f"Most results to return (default {{max_results}}; more than {MAX_SEARCH_RESULTS} is"
                    f" clamped to {MAX_SEARCH_RESULTS}).")
    min_score: float | None = Field(
        default=None, ge=0, le=1, validation_alias=AliasChoices("minScore", "min_score"),
        description="The answer's threshold: no results unless the best reaches it (default {min_score});"
                    " the others are listed down to {result_floor}.")
    mode: Literal["hybrid", "vector", "keyword"] | None = Field(
        default=None, description="hybrid (keywords + meaning), vector (meaning only) or keyword (words only);"
                                  " default {mode}.")
    chat_type: Literal["direct", "group", "channel"] | None = Field(
        default=None, validation_alias=AliasChoices("chatType", "chat_type"),
        description="Where the answer goes: a direct chat, or a group or channel chat (with citations 'auto',"
                    " the default, citations are left out in group and channel chats).")
    sources: list[Literal["memory", "sessions", "store"]] | None = Field(
        default=None, min_length=1,
        json_schema_extra={"uniqueItems": True},  # asked of clients; a repeated source is dropped, not refused
        description="Only these sources: 'memory' (notes), 'sessions' (chat transcripts), 'store' (memories"
                    " saved with memory_store; merged by score). Default: all indexed sources (not the store).")


def _search_schema_values(settings: Settings) -> dict[str, object]:
    """The settings ``memory_search``'s input schema states (its defaults)."""
    q = settings.query
    min_score = (f"{q.threshold():g}, for a query whose words or meaning memory lacks; any other"
                 " query keeps its weak results" if q.by_support() else f"{q.threshold():g}")
    return {"max_results": q.max_results, "min_score": min_score, "result_floor": f"{q.result_floor:g}",
            "mode": q.search_mode()}


class GetArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    path: str = Field(min_length=1, description="Indexed path or citation from a search result, e.g."
                                                " 'memory/2026-11-02.md' or 'memory/2026-11-02.md#L10-L20'"
                                                " (then those lines).")
    from_line: int | None = Field(default=None, ge=1, alias="from",
                                  description="First line to return, 1-based (default 1).")
    lines: int | None = Field(default=None, ge=1, le=MAX_GET_LINES,
                              description=f"Number of lines to return (default and maximum {MAX_GET_LINES}).")


class StatusArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WriteArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=MAX_WRITE_CHARS,
                      description="The note, in Markdown; a few self-contained lines.")
    path: str | None = Field(default=None, min_length=1,
                             description="MEMORY.md or memory/<name>.md (default: today's memory/YYYY-MM-DD.md).")


WRITE_DESCRIPTION = (
    "Write a lasting note to memory: decisions, preferences, facts and todos worth keeping past this"
    " conversation. Appends the text to today's daily note memory/YYYY-MM-DD.md (default) or to MEMORY.md"
    " (curated long-term memory) or another memory/*.md, and indexes it at once, so memory_search finds it"
    " right after. Secrets in the text are masked before writing. Returns the path and the lines written"
    " (a citation). Refused for paths outside the memory files and for a read-only workspace."
)

WRITE_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "start_line": {"type": "integer"}, "end_line": {"type": "integer"},
                   "citation": {"type": "string"}, "chars": {"type": "integer"}, "redacted": {"type": "boolean"},
                   "indexed": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["path", "citation", "indexed"],
}

FLUSH_PROMPT_NAME = "memory_flush"

SEARCH_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "results": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "startLine": {"type": "integer"},
                    "endLine": {"type": "integer"},
                    "score": {"type": "number"},
                    "snippet": {"type": "string"},
                    "source": {"type": "string"},
                    "citation": {"type": "string"},
                    "match": {"type": "string", "enum": ["keyword", "vector", "both", "date"]},
                    "date": {"type": ["string", "null"]},
                    "vector_score": {"type": "number"},
                    "text_score": {"type": "number"},
                },
                "required": list(AGENT_RESULT_KEYS),
            },
        },
        "provider": {"type": "string", "description": "the provider that embedded the query ('none': keyword-only"
                                                      " index, 'qmd': qmd answered)"},
        "model": {"type": ["string", "null"]},
        "backend": {"type": "string", "enum": ["builtin", "qmd"]},
        "mode": {"type": "string", "enum": list(MODES)},
        "fallback": {"type": ["object", "null"], "description": "null, or {from, to, reason}: the answer fell back"
                                                               " to keyword-only ('keyword') or from qmd to 'builtin'"},
        "citations": {"type": "string", "enum": ["on", "off", "auto"]},
        "note": {"type": "string"},
        "stale": {"type": "boolean", "description": "the index answered from is older than its sources (then"
                                                    " stale_reason says what changed, refreshing whether a reindex"
                                                    " is running, and note says so)"},
        "stale_reason": {"type": "string"},
        "refreshing": {"type": "boolean"},
    },
    "required": ["results", "provider", "backend", "mode", "fallback", "stale"],
}

GET_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "text": {"type": "string"},
        "source": {"type": "string"},
        "from": {"type": "integer"},
        "lines": {"type": "integer"},
    },
    "required": ["path", "text"],
}

STATUS_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"state": {"type": "string", "enum": ["ok", "missing", "damaged", "newer"]}},
    "required": ["state"],
}

_READ_ONLY = types.ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                                   open_world_hint=False)


def _with_agent(tool: types.Tool, agents: list[str], default: str | None) -> types.Tool:
    schema = dict(tool.input_schema)
    schema["properties"] = {**schema["properties"], "agent": {
        "type": "string", "enum": agents,
        "description": "Whose memory: one of this server's agents" + (f" (default {default})." if default else ".")}}
    if default is None:
        schema["required"] = [*schema.get("required", []), "agent"]
    return tool.model_copy(update={"input_schema": schema})


def tool_definitions(settings: Settings, agents: list[str] | None = None,
                     default_agent: str | None = None) -> list[types.Tool]:
    """The tools as listed to clients; serving several agents, each takes an ``agent`` argument."""
    tools = _tools(settings)
    return [_with_agent(t, agents, default_agent) for t in tools] if agents else tools


def _tools(settings: Settings) -> list[types.Tool]:
    return [
        types.Tool(name="memory_search", title="Search memory", description=SEARCH_DESCRIPTION,
                   input_schema=input_schema(SearchArgs, _search_schema_values(settings)), output_schema=SEARCH_OUTPUT_SCHEMA,
                   annotations=_READ_ONLY),
        types.Tool(name="memory_get", title="Read memory lines", description=GET_DESCRIPTION,
                   input_schema=input_schema(GetArgs), output_schema=GET_OUTPUT_SCHEMA, annotations=_READ_ONLY),
        types.Tool(name="memory_status", title="Memory index status", description=STATUS_DESCRIPTION,
                   input_schema=input_schema(StatusArgs), output_schema=STATUS_OUTPUT_SCHEMA,
                   annotations=_READ_ONLY),
        types.Tool(name="memory_write", title="Write a memory note", description=WRITE_DESCRIPTION,
                   input_schema=input_schema(WriteArgs), output_schema=WRITE_OUTPUT_SCHEMA,
                   annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                                     idempotent_hint=False, open_world_hint=False)),
        *store_tool_definitions(),  # memory_store, memory_recall, memory_list, memory_forget
    ]


def flush_prompt(settings: Settings) -> types.GetPromptResult:
    """The memory flush's silent turn (compaction.memory_flush), today's date filled in: one user
    message, the system prompt's text first, then the prompt (an MCP prompt has no system role, and
    two user messages read as two turns); ``_meta`` carries the two apart (``systemPrompt``,
    ``prompt``) for a runtime that adds the first to its system prompt itself."""
    import datetime as _dt

    f = settings.compaction.memory_flush
    today = _dt.date.today().isoformat()
    system, prompt = f.system_prompt.replace("YYYY-MM-DD", today), f.prompt.replace("YYYY-MM-DD", today)
    return types.GetPromptResult(
        description="Memory flush before compaction: send this message as one silent turn (a reply of NO_REPLY"
                    " means nothing to store); _meta.systemPrompt and _meta.prompt hold its two parts.",
        messages=[types.PromptMessage(role="user", content=types.TextContent(
            type="text", text=f"{system}\n\n{prompt}" if system.strip() else prompt))],
        _meta={"systemPrompt": system, "prompt": prompt})


# -- the tools, transport-free -------------------------------------------------------------------

class MemoryTools:
    """The tool implementations over one :class:`memory_core.api.Memory` (the front door every
    entry point uses); synchronous and thread-safe.

    Each method takes the raw argument dict of a tool call and returns a JSON-ready dict, or
    raises :class:`pydantic.ValidationError` (bad arguments) or a :class:`MemoryCoreError`
    (missing or damaged index, refused path). The memory's sync triggers start with the server
    (:func:`serve`) and at a client's ``initialize``, not at the first call.
    """

    def __init__(self, settings: Settings, searcher: Searcher | None = None, *,
                 max_searchers: int = MAX_CONCURRENT_CALLS) -> None:
        self.settings = settings
        # A Searcher answers one call at a time (it holds its index and provider under a lock):
        # the memory lends each concurrent call one of its own, so a search waiting on a slow
        # provider never holds up another client's get or status (issue 22).
        self.memory = Memory(settings, auto_start=False, max_searchers=max_searchers,
                             searcher=searcher if searcher is not None else open_searcher(settings))
        self.searcher = self.memory.searcher
        sync = self.memory.sync  # each trigger acts only when its [sync] setting is on
        assert sync is not None
        self.sync: SyncManager = sync
        self.handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "memory_search": self.search, "memory_get": self.get, "memory_status": self.status,
            "memory_write": self.write,
        }
        # the LanceDB memory store: the memory's own (opened on first use, closed with it), so the
        # store tools write the instance memory_search and memory_get read
        self.store_tools = StoreTools(settings, opener=lambda: self.memory.store)
        self.handlers.update(self.store_tools.handlers())

    def search(self, arguments: dict[str, Any]) -> dict[str, object]:
        a = SearchArgs.model_validate(arguments)
        # the same answer as `search --json`: shaped (citations mode, injection budget) there; the
        # memory store searched only when named (the memory's store, its memories merged by score);
        # [sync] on_search: a dirty index is refreshed first (waiting at most search_wait_ms) and an
        # answer from a stale index says so
        return self.memory.answer(a.query, max_results=a.max_results, min_score=a.min_score,
                                  sources=list(dict.fromkeys(a.sources)) if a.sources else None,
                                  mode=a.mode, chat_type=a.chat_type).to_dict()

    def get(self, arguments: dict[str, Any]) -> dict[str, object]:
        a = GetArgs.model_validate(arguments)
        # a store:<id> citation (memory_search with sources ["store"]) is read from the memory's store
        return self.memory.read(a.path, from_line=a.from_line, lines=a.lines).to_dict()

    def status(self, arguments: dict[str, Any]) -> dict[str, object]:
        StatusArgs.model_validate(arguments)
        st = self.memory.status().to_dict()
        st["sync"] = self.sync.status()
        if self.settings.agent:
            st["agent"] = self.settings.agent
        safe: dict[str, Any] = json.loads(json.dumps(st, default=str))  # JSON-safe values only
        return safe

    def write(self, arguments: dict[str, Any]) -> dict[str, object]:
        a = WriteArgs.model_validate(arguments)

        def reindex() -> object:  # in this call: the text is searchable when the tool answers
            # ... within WRITE_REINDEX_DEADLINE_S: a stalled provider held the call for its whole
            # retry budget (46 s at remote.timeout_s = 5, about 6 min at the defaults) and every
            # write behind it (the fortieth session's audit H4). The run goes on in the background
            # and the note, written already, is indexed when it ends.
            done: list[Any] = []
            worker = threading.Thread(target=lambda: done.append(self.sync.reindex_now("memory_write")),
                                      name="memory-write-reindex", daemon=True)
            worker.start()
            worker.join(WRITE_REINDEX_DEADLINE_S)
            if not done:
                raise RunError(f"the reindex is still running after {WRITE_REINDEX_DEADLINE_S:.0f} s (a slow embedding"
                               " provider?); it goes on in the background and indexes the note when it ends")
            run = done[0]
            if not run.ok:
                raise RunError(run.error or "the reindex failed")
            return run

        return write_memory(self.settings, a.text, a.path, runner=reindex).to_dict()

    def close(self) -> None:
        self.memory.close()  # its sync triggers, searchers, indexer and memory store
        self.store_tools.close()


class _FleetSync:
    """The sync triggers of every agent a server serves."""

    def __init__(self, fleet: AgentTools) -> None:
        self._fleet = fleet

    def start(self) -> None:
        for t in self._fleet.all_tools():
            t.sync.start()

    def on_session_start(self) -> None:
        for t in self._fleet.all_tools():
            t.sync.on_session_start()


class AgentTools:
    """The tools of several agents behind one server: each call names its agent (``agent``;
    default ``agents.default``) and is answered by that agent's :class:`MemoryTools` only, over
    its own index, so no agent ever sees another's memories."""

    def __init__(self, by_agent: dict[str, Settings]) -> None:
        if not by_agent:
            raise UsageError("no agents to serve")
        self.by_agent = dict(by_agent)
        first = next(iter(self.by_agent.values()))
        self.default = first.agents.default
        self.settings = self.by_agent.get(self.default or "", first)  # the prompt's settings
        self._tools: dict[str, MemoryTools] = {}
        self._lock = threading.Lock()
        self.sync = _FleetSync(self)
        # every tool a MemoryTools has, the memory store's included: each to the named agent's own
        self.handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            t.name: self._route(t.name) for t in _tools(self.settings)}

    def tools_for(self, agent: Any) -> MemoryTools:
        from memory_core.runtime.agents import UnknownAgentError

        if agent is None:
            if self.default is None:
                raise UsageError(f"name the agent: this server serves {', '.join(self.by_agent)}")
            agent = self.default
        if not isinstance(agent, str) or agent not in self.by_agent:
            raise UnknownAgentError(f"unknown agent {agent!r}; this server serves {', '.join(self.by_agent)}")
        with self._lock:
            if agent not in self._tools:
                self._tools[agent] = MemoryTools(self.by_agent[agent])
            return self._tools[agent]

    def all_tools(self) -> list[MemoryTools]:
        return [self.tools_for(a) for a in self.by_agent]

    def _route(self, name: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
        def handler(arguments: dict[str, Any]) -> dict[str, object]:
            args = dict(arguments)
            tools = self.tools_for(args.pop("agent", None))
            out = tools.handlers[name](args)
            return {**out, "agent": tools.settings.agent} if isinstance(out, dict) else out

        return handler

    def close(self) -> None:
        with self._lock:
            tools = list(self._tools.values())
        for t in tools:
            t.close()


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for e in exc.errors():
        loc = ".".join(str(x) for x in e.get("loc", ())) or "arguments"
        msg = "unknown argument" if e.get("type") == "extra_forbidden" else e.get("msg", "invalid value")
        parts.append(f"{loc}: {msg}")
    return "; ".join(parts)


def _utf8_text(text: str) -> str:
    """``text`` encodable as UTF-8: a path's bytes that are not UTF-8 (kept by Python as the
    surrogates ``\\udc80``-``\\udcff``) shown escaped, ``caf\\xe9``; any other lone surrogate U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join(f"\\x{ord(c) - 0xDC00:02x}" if "\udc80" <= c <= "\udcff"
                       else "\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
    return text


def utf8_safe(value: object) -> object:
    """``value`` (an answer: JSON's types) with every string, dict keys too, encodable as UTF-8, as
    the MCP transports must send it (:func:`_utf8_text`). One path that was not UTF-8 in an answer
    killed the stdio server's writer, and every later call on the session hung."""
    if isinstance(value, str):
        return _utf8_text(value)
    if isinstance(value, dict):
        return {_utf8_text(k) if isinstance(k, str) else k: utf8_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [utf8_safe(v) for v in value]
    return value


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=_utf8_text(text))], is_error=True)


async def call_tool(tools: MemoryTools | AgentTools, name: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
    """Run one tool call in a worker thread and turn every failure into an error result; the
    answer and any error text are made UTF-8-safe here (:func:`utf8_safe`)."""
    handler = tools.handlers.get(name)
    if handler is None:
        return _error(f"unknown tool {name!r}; this server has {', '.join(tools.handlers)}")
    try:
        data = await anyio.to_thread.run_sync(handler, dict(arguments or {}))
    except ValidationError as exc:
        return _error(f"{name}: invalid arguments: {_validation_message(exc)}")
    except MemoryCoreError as exc:
        # a read's path comes from a search's citation; a write's is a note it names (no search to take it from)
        hint = " (use a path from a memory_search result)" \
            if isinstance(exc, PathError) and "no longer exists" not in str(exc) and name == "memory_get" else ""
        return _error(f"{name}: {exc}{hint}")
    except Exception as exc:  # never let one call take the server down
        log.exception("%s failed", name)
        return _error(f"{name} failed: {exc.__class__.__name__}: {exc}")
    data = cast("dict[str, Any]", utf8_safe(data))  # the one place answers leave the server: UTF-8
    text = json.dumps(data, ensure_ascii=False)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=data)


def _version() -> str:
    try:
        return metadata.version("memory-core")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0"


def build_server(settings: Settings, tools: MemoryTools | AgentTools | None = None, *,
                 agents: dict[str, Settings] | None = None) -> tuple[Server[Any], Any]:
    """A low-level MCP server exposing :class:`MemoryTools` (created from ``settings`` if not
    given), or with ``agents`` the :class:`AgentTools` of several agents."""
    if tools is None:
        tools = AgentTools(agents) if agents else MemoryTools(settings)
    if isinstance(tools, AgentTools):
        defs = tool_definitions(tools.settings, list(tools.by_agent), tools.default)
    else:
        defs = tool_definitions(settings)
    schemas = {t.name: t.input_schema for t in defs}

    async def on_list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=defs)

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return await call_tool(tools, params.name, params.arguments)

    prompt = types.Prompt(name=FLUSH_PROMPT_NAME, title="Memory flush before compaction",
                          description="The two prompts of the silent turn that asks the model to write lasting"
                                      " notes (memory_write) before the session is compacted.")

    async def on_list_prompts(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=[prompt])

    async def on_get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        if params.name != FLUSH_PROMPT_NAME:
            raise ValueError(f"unknown prompt {params.name!r}; this server has {FLUSH_PROMPT_NAME}")
        return flush_prompt(tools.settings)

    server: Server[Any] = Server(
        SERVER_NAME, version=_version(), title="memory-core", instructions=INSTRUCTIONS,
        get_tool_input_schema=schemas.get, on_list_tools=on_list_tools, on_call_tool=on_call_tool,
        on_list_prompts=on_list_prompts, on_get_prompt=on_get_prompt,
    )

    async def session_start(ctx: Any, call_next: CallNext) -> HandlerResult:  # [sync] on_session_start
        if ctx.method in ("initialize", "server/discover"):  # a client's session opens (legacy, modern)
            await anyio.to_thread.run_sync(tools.sync.on_session_start)
        return await call_next(ctx)

    server.middleware.append(session_start)
    return server, tools


def check_host(host: str) -> None:
    """The HTTP transport has no authentication: serve loopback addresses only."""
    if host not in LOOPBACK_HOSTS:
        raise UsageError(f"refusing to serve memory on {host}: the HTTP transport has no authentication;"
                         f" use one of {', '.join(LOOPBACK_HOSTS)}")


def serve(settings: Settings, *, transport: Literal["stdio", "http"] = "stdio", host: str = "127.0.0.1",
          port: int = 8765, path: str = "/mcp", agents: dict[str, Settings] | None = None) -> None:
    """Serve until stdin closes (stdio) or the process is interrupted (HTTP); with ``agents``,
    every agent named (each call names its own)."""
    if transport == "http":
        check_host(host)
    server, tools = build_server(settings, agents=agents)
    tools.sync.start()  # [sync] watch and interval_minutes
    try:
        if transport == "stdio":
            anyio.run(_serve_stdio, server)
        else:
            anyio.run(_serve_http, server, host, port, path)
    finally:
        tools.close()


async def _serve_stdio(server: Server[Any]) -> None:
    import io
    import sys

    from mcp.server.stdio import stdio_server

    from memory_core.sources.safeio import LoneSurrogateFreeLines

    # a request whose JSON escapes a lone surrogate must still get a reply (issue 17)
    stdin = LoneSurrogateFreeLines(anyio.wrap_file(io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8",
                                                                    errors="replace")))
    async with stdio_server(stdin=stdin) as (read_stream, write_stream):  # type: ignore[arg-type]
        await server.run(read_stream, write_stream, server.create_initialization_options())


HTTP_SESSION_IDLE_S = 600.0
"""An HTTP session with no request for this long is ended (its id then answers 404 and the client
opens a new one): abandoned sessions do not pile up (2,000 held 73 MB under the SDK's 30 minutes)."""
HTTP_MAX_SESSIONS = 256  # open HTTP sessions at most; one more is answered 503 until one ends


def http_app(server: Server[Any], host: str, path: str) -> Starlette:
    """The Starlette app of the HTTP transport, its sessions reaped (:data:`HTTP_SESSION_IDLE_S`)
    and bounded (:data:`HTTP_MAX_SESSIONS`)."""
    return server.streamable_http_app(streamable_http_path=path, host=host, session_idle_timeout=HTTP_SESSION_IDLE_S,
                                      max_sessions=HTTP_MAX_SESSIONS)


async def _serve_http(server: Server[Any], host: str, port: int, path: str) -> None:
    import uvicorn

    app = http_app(server, host, path)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()
