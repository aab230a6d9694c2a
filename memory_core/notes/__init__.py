"""What agents write: the write tool (:mod:`~memory_core.notes.write`), the memory flush before a
conversation is compacted (:mod:`~memory_core.notes.flush`) and the LanceDB memory store
(:mod:`~memory_core.notes.memory_store`). Above both sides: a write reindexes, the store searches.
"""

# The memory store's categories and default importance: read by the CLI's parser without loading the
# store (memory_core/notes/memory_store.py), so `memory-core --help` stays cheap.
CATEGORIES = ("preference", "fact", "decision", "entity", "other")
DEFAULT_IMPORTANCE = 0.7  # OpenClaw's memory_store default
