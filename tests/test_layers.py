"""The import graph of the code: layers point down, with no cycles (ARCHITECTURE.md).

Every import counts, also the ones inside functions: an import deferred into a function
still makes the two modules depend on each other, it only hides the cycle from Python.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("memory_core", "flows", "tasks")


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from pkg import mod` imports the submodule when there is one
                names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                         for a in node.names]
            for name in names:
                while name and name not in modules:
                    name = name.rpartition(".")[0]
                if name and name != mod and not mod.startswith(name + "."):
                    graph[mod].add(name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_library_never_imports_prefect_flows_or_tasks() -> None:
    """Every memory_core module, with no exemption: the orchestrator plugs in (memory_core.runtime.engines)."""
    for mod, deps in import_graph().items():
        if mod.startswith("memory_core"):
            assert not {d for d in deps if d.split(".")[0] in ("flows", "tasks")}, mod
    for path in (ROOT / "memory_core").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert not any(n.split(".")[0] in ("prefect", "flows", "tasks") for n in names), (path, names)


def test_the_prefect_engine_is_registered_as_an_entry_point() -> None:
    """pyproject.toml registers it; the installed metadata finds it (`pip install -e .` after editing)."""
    import tomllib

    from memory_core.runtime import engines

    eps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][engines.ENTRY_POINT_GROUP]
    assert eps == {"prefect": "flows.engine:PrefectEngine"}
    assert engines.registered()["prefect"] == "flows.engine:PrefectEngine"
    found = engines.engine("prefect")
    assert found is not None and type(found).__module__ == "flows.engine"
    assert isinstance(found, engines.Engine)


def test_the_engine_layers_point_down() -> None:
    """runtypes -> stages -> streaming -> pipeline (the orchestrator) -> CLI and flows."""
    g = import_graph()
    order = ["memory_core.index.runtypes", "memory_core.index.stages", "memory_core.index.streaming", "memory_core.index.pipeline"]
    for i, lower in enumerate(order):
        for upper in order[i + 1:] + ["memory_core.apps.cli", "flows.reindex", "flows.executor"]:
            assert upper not in g[lower], f"{lower} imports {upper}"
    # the query side never imports the indexing code
    query_side = ["memory_core.query.search", "memory_core.query.retrieval", "memory_core.query.rank", "memory_core.query.reading",
                  "memory_core.query.status", "memory_core.query.dates", "memory_core.query.ranking"]
    for indexing in order[1:] + ["memory_core.index.batch_runner", "memory_core.index.writer_proc", "memory_core.index.qmd"]:
        for query in query_side + ["memory_core.query.qmd"]:
            assert indexing not in g[query], (query, indexing)


# -- the entry points stand side by side on the library ----------------------------------------

# The programs a user starts: the command line, the MCP server, the watcher (and the Prefect
# flows, in flows/). `memory_core.runtime.sync` (the MCP server's sync triggers), `watching` (the watcher
# and scheduler both use), `indexer` (the one in-process indexer), `api`, `export` are library.
ENTRY_POINTS = ("memory_core.apps.cli", "memory_core.apps.mcp_server", "memory_core.apps.watch")
# `memory-core mcp` and `memory-core watch` are commands of the one console script: the CLI hands
# over to those entry points with one call each, and uses nothing else of theirs
HANDOVER = {("memory_core.apps.cli", "memory_core.apps.mcp_server"): {"serve", "check_host"},
            ("memory_core.apps.cli", "memory_core.apps.watch"): {"run_watch"}}


def used_names(source: str, module: str) -> set[str]:
    """What ``source`` takes from ``module``: ``from module import x`` and ``alias.x`` after
    ``from package import module`` / ``import module as alias``."""
    package, _, leaf = module.rpartition(".")
    aliases: set[str] = set()
    names: set[str] = set()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            if node.module == module:
                names |= {a.name for a in node.names}
            elif node.module == package:
                aliases |= {a.asname or a.name for a in node.names if a.name == leaf}
        elif isinstance(node, ast.Import):
            aliases |= {a.asname for a in node.names if a.name == module and a.asname}
            if any(a.name == module and not a.asname for a in node.names):
                names.add("*")  # `import a.b.c` used as a.b.c.x: not a hand-over
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            names.add(node.attr)
    return names


def test_the_entry_points_do_not_import_each_other() -> None:
    """CLI, MCP server, watch and the flows sit side by side on the library: no library module
    imports an entry point, no entry point another (the CLI only hands its `mcp` and `watch`
    commands over), and the flows and tasks import none."""
    g = import_graph()
    for mod, deps in g.items():
        for ep in ENTRY_POINTS:
            if ep not in deps:
                continue
            assert (mod, ep) in HANDOVER, f"{mod} imports the entry point {ep}"
            path = ROOT / (mod.replace(".", "/") + ".py")
            assert used_names(path.read_text(), ep) <= HANDOVER[(mod, ep)], (mod, ep)
    # the shared machinery is library: sync needs the watcher, the MCP server the sync triggers
    assert "memory_core.runtime.watching" in g["memory_core.runtime.sync"] and "memory_core.runtime.sync" in g["memory_core.apps.mcp_server"]


def test_the_entry_point_check_finds_imports() -> None:
    src = ("from memory_core.apps import mcp_server\nfrom memory_core.apps.watch import run_watch, make_runner\n"
           "mcp_server.serve(1)\nmcp_server.MemoryTools(2)\n")
    assert used_names(src, "memory_core.apps.mcp_server") == {"serve", "MemoryTools"}
    assert used_names(src, "memory_core.apps.watch") == {"run_watch", "make_runner"}
    assert used_names("import memory_core.apps.watch\n", "memory_core.apps.watch") == {"*"}


def test_one_in_process_indexer() -> None:
    """Every in-process reindex of an entry point or the API goes through memory_core.index.indexer:
    only the orchestrator's own callers (the indexer, the flows) call run_index."""
    callers = set()
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and (getattr(node.func, "id", None) == "run_index"
                                                   or getattr(node.func, "attr", None) == "run_index"):
                    callers.add(path.relative_to(ROOT).as_posix())
    assert callers == {"memory_core/index/indexer.py", "flows/reindex.py"}, callers


def test_qmds_halves_stand_apart() -> None:
    """qmd's indexing half sits beside the orchestrator, its search half beside the builtin search:
    the two halves share only memory_core.storage.qmd, and importing one never loads the other."""
    import subprocess
    import sys

    g = import_graph()
    halves = {"memory_core.index.qmd", "memory_core.query.qmd"}
    for half in halves:
        assert not g[half] & (halves - {half})
        assert "memory_core.storage.qmd" in g[half]
    assert "memory_core.index.qmd" in g["memory_core.index.pipeline"] and "memory_core.query.qmd" in g["memory_core.query.backends"]
    code = ("import sys, memory_core.index.qmd, memory_core.storage.qmd as q; q.state_dir; "
            "print(sorted(m for m in sys.modules if m in ('memory_core.query.qmd', 'memory_core.query.search')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"


def test_the_two_sides_are_packages_that_never_import_each_other() -> None:
    """memory_core.index (the indexing side) and memory_core.query (the query side): a reader
    needs only the index file, and the indexer never asks the query code anything."""
    g = import_graph()
    index = [m for m in g if m.startswith("memory_core.index.")]
    query = [m for m in g if m.startswith("memory_core.query.")]
    assert "memory_core.index.pipeline" in index and "memory_core.query.search" in query
    for mod in index:
        assert not {d for d in g[mod] if d.startswith("memory_core.query.")}, mod
    for mod in query:
        assert not {d for d in g[mod] if d.startswith("memory_core.index.")}, mod


def test_sources_sit_below_both_sides() -> None:
    """memory_core.sources (discovery, sessions, redact, safeio, freshness) is read by the indexer
    and by the reader; it imports neither side, nor any entry point: only settings, errors, the
    index file's reader (freshness compares the sources with the live index), the index's recorded
    settings (a reader resolves transcript paths by what the index recorded) and the provider
    catalog (where the redaction default asks whether a provider runs on this machine)."""
    g = import_graph()
    sources = [m for m in g if m.startswith("memory_core.sources.")]
    assert {"memory_core.sources.discovery", "memory_core.sources.sessions", "memory_core.sources.redact",
            "memory_core.sources.safeio", "memory_core.sources.freshness"} <= set(sources)
    allowed = {"memory_core.config", "memory_core.errors", "memory_core.storage.store", "memory_core.storage.indexmeta",
               "memory_core.embeddings.catalog", *sources}
    for mod in sources:
        assert g[mod] <= allowed, (mod, g[mod] - allowed)


# -- provider facts live on the provider classes ----------------------------------------------

PROVIDER_NAMES = frozenset({"local", "openai", "gemini", "voyage", "mistral", "none"})
HOSTED_NAMES = PROVIDER_NAMES - {"local", "none"}  # never a legitimate literal outside the providers
# (file, code) pairs allowed for now, each with the reason
NAME_BRANCH_ALLOWED: set[tuple[str, str]] = set()


def name_branches(source: str) -> list[str]:
    """Code that decides by a provider's name: a comparison of something provider-ish (or any
    expression, for a hosted provider's name) with a provider name, and tables keyed by a
    hosted provider's name ("openai", "openai/model")."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            consts = {m.value for s in sides for m in ast.walk(s) if isinstance(m, ast.Constant)}
            text = ast.unparse(node)
            if consts & HOSTED_NAMES or (consts & PROVIDER_NAMES and ("provider" in text or ".name" in text
                                                                      or "flavour" in text)):
                found.append(text)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                node.value in HOSTED_NAMES or any(node.value.startswith(f"{n}/") for n in PROVIDER_NAMES)):
            found.append(repr(node.value))
    return found


def test_nothing_outside_the_providers_decides_by_a_provider_name() -> None:
    """Parallelism, vectors or not, prices, the Batch API client, unit-length batch vectors,
    chunk defaults and the input window are facts on the provider classes
    (memory_core/embeddings): the engine asks the provider, never its name."""
    offenders = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("memory_core/embeddings/") or rel == "memory_core/plugins.py":
                continue  # the providers, and the table of built-in entry points (names -> classes)
            offenders += [(rel, code) for code in name_branches(path.read_text())
                          if (rel, code) not in NAME_BRANCH_ALLOWED]
    assert offenders == []


def test_the_name_branch_check_finds_branches() -> None:
    src = ('if provider.name == "local": pass\n'
           'x = 1 if self.provider in ("none", "local") else 2\n'
           'y = flavour == "voyage"\n'
           'PRICES = {"openai/text-embedding-3-small": 0.02, "gemini": 0.5}\n'
           'z = engine == "local"\n')
    assert set(name_branches(src)) == {"provider.name == 'local'", "self.provider in ('none', 'local')",
                                       "flavour == 'voyage'", "'voyage'", "'openai/text-embedding-3-small'",
                                       "'gemini'"}


def test_the_built_in_providers_are_registered_as_entry_points() -> None:
    """pyproject.toml registers the built-ins under the same entry-point group as any other
    provider; the catalog's table (for installs whose metadata predates one) agrees with it."""
    import tomllib

    from memory_core.embeddings.catalog import _REGISTRY, ENTRY_POINT_GROUP

    eps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][ENTRY_POINT_GROUP]
    assert eps == {name: f"{mod}:{cls}" for name, (mod, cls) in _REGISTRY.items()}


# -- one place decides chunk sizes and embedding concurrency ----------------------------------

def literal_defaults(source: str) -> list[str]:
    """Parameters and fields about chunk size or embedding concurrency whose default is a
    number written out (not the one constant: chunking.DEFAULT_CHUNK_*, runtypes.EMBED_CONCURRENCY)."""
    found: list[str] = []
    watched = ("concurrency", "tokens", "overlap")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            pos = args.posonlyargs + args.args
            pairs = list(zip(pos[len(pos) - len(args.defaults):], args.defaults, strict=True))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
            found += [f"{node.name}({a.arg}={ast.unparse(d)})" for a, d in pairs
                      if a.arg.endswith(watched) and isinstance(d, ast.Constant) and type(d.value) is int]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and node.target.id.endswith(("embed_concurrency", "chunk_tokens", "chunk_overlap")):
            value = node.value
            if isinstance(value, ast.Call):  # Field(default=4, ...)
                value = next((k.value for k in value.keywords if k.arg == "default"), None)
            if isinstance(value, ast.Constant) and type(value.value) is int:
                found.append(f"{node.target.id} = {value.value}")
    return found


def test_chunk_size_and_concurrency_defaults_are_decided_once() -> None:
    offenders = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            offenders += [(path.relative_to(ROOT).as_posix(), x) for x in literal_defaults(path.read_text())]
    # the local model's own chunk default (its 256-piece window) is a provider fact
    assert offenders == [], offenders


def test_the_defaults_check_finds_literals() -> None:
    src = ("def run(s, concurrency: int = 4, *, tokens=400, overlap: int = OVERLAP): pass\n"
           "class P(BaseModel):\n    embed_concurrency: int = Field(default=4, ge=1)\n")
    assert literal_defaults(src) == ["run(concurrency=4)", "run(tokens=400)", "embed_concurrency = 4"]


# -- one ordered list of floors: nothing imports a floor above its own ----------------------------

# Ground first. Every module of memory_core sits in exactly one room (a module or a folder); a room
# may import its own floor and the floors below, never one above. `index` and `query` share a floor
# and never import each other (test_the_two_sides_are_packages_that_never_import_each_other).
FLOORS: list[tuple[str, ...]] = [
    ("memory_core.errors", "memory_core.failpoints", "memory_core.plugins", "memory_core.secrets",
     "memory_core.settings_model"),  # the ground
    ("memory_core.config",),  # one settings model with every default
    ("memory_core.embeddings",),  # providers, their Batch API clients, prices, chunk defaults
    ("memory_core.storage",),  # the files both sides read: the index, the embedding cache, qmd's state
    ("memory_core.sources",),  # what is indexed: discovery, transcripts, redaction, safe opening
    ("memory_core.index", "memory_core.query"),  # the indexing side | the query side
    ("memory_core.export",),  # copies of the index: Parquet/JSONL, LanceDB
    ("memory_core.notes",),  # what agents write: the write tool, the flush, the memory store
    ("memory_core.runtime",),  # settings resolution, agents, sync, watching, engines
    ("memory_core.api",),  # the one front door
    ("memory_core.apps",),  # cli, mcp_server, watch, evaluation
    ("memory_core",),  # the package root: lazy re-exports of the API
]


def room_of(module: str) -> tuple[int, str] | None:
    """(floor, room) of ``module``: its longest matching room, or None when it sits in none."""
    best: tuple[int, str] | None = None
    for i, rooms in enumerate(FLOORS):
        for room in rooms:
            inside = module == room or (module.startswith(room + ".") and room != "memory_core")  # the root: itself only
            if inside and (best is None or len(room) > len(best[1])):
                best = (i, room)
    return best


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for mod, deps in sorted(graph.items()):
        if not mod.startswith("memory_core"):
            continue
        here = room_of(mod)
        assert here is not None, f"{mod} sits in no room of FLOORS"
        for dep in sorted(d for d in deps if d.startswith("memory_core")):
            there = room_of(dep)
            assert there is not None, f"{dep} sits in no room of FLOORS"
            if there[0] > here[0]:
                found.append(f"{mod} -> {dep}")
    return found


def test_no_import_runs_back_up() -> None:
    g = import_graph()
    assert upward_imports(g) == []
    # every room exists, and every module of memory_core sits in one (room_of asserts it)
    rooms = {room for floor in FLOORS for room in floor}
    assert all(any(m == r or m.startswith(r + ".") for m in g) for r in rooms), rooms
    assert len([m for m in g if m.startswith("memory_core.")]) > 60  # the graph sees the package


def test_the_floor_check_finds_an_upward_import() -> None:
    graph = {"memory_core.config": {"memory_core.query.ranking"}, "memory_core.query.ranking": {"memory_core.config"},
             "memory_core.apps.cli": {"memory_core.api"}, "memory_core.api": set()}
    assert upward_imports(graph) == ["memory_core.config -> memory_core.query.ranking"]
    try:
        upward_imports({"memory_core.stray": set()})
    except AssertionError as err:
        assert "memory_core.stray sits in no room" in str(err)
    else:
        raise AssertionError("a module outside every room passed")
