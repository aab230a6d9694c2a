"""Provider Batch APIs (OpenAI, Gemini, Voyage) for embedding a run's cache misses.

Library API (no Prefect):

- :func:`run_batch_embedding` -- the whole thing in-process (used by ``pipeline.run_index``).
- :class:`BatchRun` + a :class:`JobOps` executor -- the coordinator, for orchestrators that run
  each job step as their own task (see ``flows/batch.py``).
- Job steps, each taking a :class:`BatchContext` and a small spec/record:
  :func:`plan_jobs`, :func:`submit_job`, :func:`poll_job`, :func:`collect_job`,
  :func:`cancel_job`, :func:`recover_job`; :func:`open_context` builds the context.
- :class:`BatchLedger` -- the durable record of submitted jobs, in the embedding cache file.
- :func:`estimate_cost` / :data:`DEFAULT_PRICES` -- the price table and cost estimate.
"""

from memory_core.batch.cost import DEFAULT_BATCH_DISCOUNT, DEFAULT_PRICES, cost_line, estimate_cost
from memory_core.batch.jobs import (
    BatchContext,
    cancel_job,
    collect_job,
    open_context,
    plan_jobs,
    poll_job,
    recover_job,
    submit_job,
)
from memory_core.batch.ledger import BatchLedger
from memory_core.batch.runner import BatchRun, JobOps, LocalOps, run_batch_embedding
from memory_core.batch.types import CollectResult, JobRecord, JobSpec

__all__ = [
    "DEFAULT_BATCH_DISCOUNT", "DEFAULT_PRICES", "BatchContext", "BatchLedger", "BatchRun", "CollectResult",
    "JobOps", "JobRecord", "JobSpec", "LocalOps", "cancel_job", "collect_job", "cost_line", "estimate_cost",
    "open_context", "plan_jobs", "poll_job", "recover_job", "run_batch_embedding", "submit_job",
]
