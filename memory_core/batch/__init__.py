"""Provider Batch APIs (OpenAI, Gemini, Voyage) for embedding a run's cache misses.

No Prefect here, and no imports at package level (the modules import each other directly, so
importing one never drags in the rest):

- :mod:`~memory_core.batch.runner`: :class:`BatchRun`, the coordinator, and the :class:`JobOps`
  protocol its executors implement (:class:`LocalOps` here, ``flows.batch.PrefectOps`` for Prefect).
  The orchestrator (``memory_core.index.pipeline.run_index``) runs it before the streamed build.
- :mod:`~memory_core.batch.jobs`: the job steps, each taking a :class:`BatchContext` and a small
  spec/record: ``plan_jobs``, ``submit_job``, ``poll_job``, ``collect_job``, ``cancel_job``,
  ``recover_job``; ``open_context`` builds the context.
- :mod:`~memory_core.batch.ledger`: the durable record of submitted jobs, in the embedding cache file.
- :mod:`~memory_core.batch.cost`: the price table and cost estimate.
"""
