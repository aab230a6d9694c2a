"""The indexing side: from discovered sources to a published index.

- :mod:`~memory_core.index.chunking`: the reference chunker and transcript exchanges;
- :mod:`~memory_core.index.stages`: one stage function each (discover, chunk, cache lookup,
  embed, build, verify, publish), the executors' unit of work;
- :mod:`~memory_core.index.streaming`: the streaming build (rows written as vectors arrive);
- :mod:`~memory_core.index.pipeline`: the orchestrator, :func:`run_index` (full or incremental,
  sync or Batch API, the fallback, how a run is published);
- :mod:`~memory_core.index.writer`: the index writer (a temp file beside the live one, or one
  transaction on it), its :class:`BuildWriter` protocol and the swap;
- :mod:`~memory_core.index.writer_proc`: the index writer in a child process;
- :mod:`~memory_core.index.runtypes`: a run's typed values (``RunSummary``, ``Progress``) and the
  one concurrency default;
- :mod:`~memory_core.index.indexer`: the one in-process indexer the CLI, watch, the sync
  triggers and the Python API share;
- Batch API jobs: :mod:`~memory_core.index.batch_runner` (:class:`BatchRun`, the coordinator, and
  the :class:`JobOps` protocol its executors implement: ``LocalOps`` here, ``flows.batch.PrefectOps``
  for Prefect), :mod:`~memory_core.index.batch_jobs` (the job steps: plan, submit, poll, collect,
  cancel, recover) and :mod:`~memory_core.index.batch_ledger` (the durable record of submitted jobs,
  in the embedding cache file). The providers' Batch API clients, their request and response
  shapes and the price table are the providers' (:mod:`memory_core.embeddings`).

It never imports :mod:`memory_core.query` (test_layers); the index file, the embedding cache
and the FTS text rules both sides agree on sit below it (``store``, ``cache``, ``textsearch``).
"""
