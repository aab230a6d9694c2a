"""The index file both sides share: what the indexer writes and a reader reads.

- :mod:`~memory_core.storage.store`: the SQLite connection (extension loading), the schema, the
  index file's tables, its meta and the writer lock (the writer and the swap are the indexing
  side's: :mod:`memory_core.index.writer`);
- :mod:`~memory_core.storage.vectors`: the vector codec (float32 and sign bits) and the bit scan;
- :mod:`~memory_core.storage.textsearch`: the FTS5 text rules both sides agree on;
- :mod:`~memory_core.storage.index_changes`: the log of what each incremental run changed;
- :mod:`~memory_core.storage.indexmeta`: the settings an index records (its record);
- :mod:`~memory_core.storage.cache` and :mod:`~memory_core.storage.cache_journal`: the embedding
  cache file (the durable memory of money spent) and each run's journal of received vectors:
  written by the indexing side, read by ``status`` on the query side.

It imports neither :mod:`memory_core.index` nor :mod:`memory_core.query` (tests/test_layers.py).
"""
