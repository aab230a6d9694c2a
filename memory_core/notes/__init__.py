"""What agents write: the write tool (:mod:`~memory_core.notes.write`), the memory flush before a
conversation is compacted (:mod:`~memory_core.notes.flush`) and the LanceDB memory store
(:mod:`~memory_core.notes.memory_store`). Above both sides: a write reindexes, the store searches.
"""
