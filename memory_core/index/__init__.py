"""The indexing side: from discovered sources to a published index.

- :mod:`~memory_core.index.chunking`: the reference chunker and transcript exchanges;
- :mod:`~memory_core.index.stages`: one stage function each (discover, chunk, cache lookup,
  embed, build, verify, publish), the executors' unit of work;
- :mod:`~memory_core.index.streaming`: the streaming build (rows written as vectors arrive);
- :mod:`~memory_core.index.pipeline`: the orchestrator, :func:`run_index` (full or incremental,
  sync or Batch API, the fallback, how a run is published);
- :mod:`~memory_core.index.writer_proc`: the index writer in a child process;
- :mod:`~memory_core.index.runtypes`: a run's typed values (``RunSummary``, ``Progress``) and the
  one concurrency default;
- :mod:`~memory_core.index.indexer`: the one in-process indexer the CLI, watch, the sync
  triggers and the Python API share.

It never imports :mod:`memory_core.query` (test_layers); the index file, the embedding cache
and the FTS text rules both sides agree on sit below it (``store``, ``cache``, ``textsearch``).
"""
