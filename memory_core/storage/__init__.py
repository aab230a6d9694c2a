"""The index file both sides share: what the indexer writes and a reader reads.

- :mod:`~memory_core.storage.store`: the SQLite connection (extension loading), the schema, the
  index file's tables and its publish primitives;
- :mod:`~memory_core.storage.vectors`: the vector codec (float32 and sign bits) and the bit scan;
- :mod:`~memory_core.storage.textsearch`: the FTS5 text rules both sides agree on;
- :mod:`~memory_core.storage.index_changes`: the log of what each incremental run changed;
- :mod:`~memory_core.storage.indexmeta`: the settings an index records (its record).

It imports neither :mod:`memory_core.index` nor :mod:`memory_core.query` (tests/test_layers.py).
"""
