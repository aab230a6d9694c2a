"""Provider Batch API clients: one small surface over three APIs.

- OpenAI: ``files.create(purpose="batch")``, ``batches.create(endpoint="/v1/embeddings",
  completion_window="24h")``, ``batches.retrieve/cancel/list``, ``files.content``.
- Voyage: the same OpenAI-shaped API at Voyage's base URL, driven with the ``openai`` SDK (the
  ``voyageai`` SDK has no batch support): ``completion_window="12h"``, the model and
  ``input_type`` in ``request_params``, lines carry only ``custom_id`` and ``body.input``.
- Gemini: ``files.upload`` (resumable), ``batches.create_embeddings`` (file source),
  ``batches.get/cancel/list``, ``files.download``.

Every call goes through the project's retry policy (429, 5xx, timeouts, resets), except
``create``, which :func:`memory_core.index.batch_jobs.submit_job` retries itself after checking that
the job was not created after all (a retried create must never start a second paid job).
Request lines carry exactly one text each; the custom id (Gemini: ``key``) is the chunk hash.
"""

from __future__ import annotations

import base64
import json
import os
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from memory_core.embeddings import batch_types as st
from memory_core.embeddings import http as capped_http
from memory_core.embeddings.base import EmbeddingProvider
from memory_core.embeddings.batch_types import BatchClient, ParsedLine, RemoteJob
from memory_core.embeddings.retry import Abandoned, Retryable, call_with_retries, within
from memory_core.errors import ProviderError
from memory_core.secrets import scrub

if TYPE_CHECKING:
    from openai import OpenAI

T = TypeVar("T")
MiB = 1024 * 1024

LOOKUP_JOBS = 200  # how many recent provider jobs to scan when looking for a lost one
# The slowest transfer of a job file (upload, download) let run to its end: its attempt may take
# remote.timeout_s plus its size at this rate (8 GiB: 9 h; a 50 MB output: 4 min), where a sync
# call's takes remote.timeout_s in all. A server that drips its answer is cut off, a big file is not.
MIN_TRANSFER_BYTES_PER_S = 256 * 1024


class OutputTooLarge(ProviderError):
    """A job's output file is larger than a Batch API download may hold
    (:data:`memory_core.embeddings.http.MAX_DOWNLOAD_BYTES`): it will be every time, so it is not
    retried, nor left in the ledger to be downloaded again by every later run."""

    def __init__(self, message: str, *, file_id: str, size: int | None, cap: int) -> None:
        super().__init__(message)
        self.file_id, self.size, self.cap = file_id, size, cap


def decode_vector(value: object) -> object:
    """A base64 embedding string as float32s; None for a string that is not base64 of whole
    float32s (the line is then a bad vector, never an exception); any other value as it came
    (a list of floats; the caller checks it as a vector)."""
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value, validate=True)
        except ValueError:  # binascii.Error
            return None
        return np.frombuffer(raw, dtype="<f4") if raw and len(raw) % 4 == 0 else None
    return value


class _RetryingClient:
    """What both batch clients share: the provider's facts, and its SDK calls retried by the
    provider's ``[remote]`` settings within the run's retry budget (shared with sync calls)."""

    def __init__(self, provider: EmbeddingProvider, client: Any, *,
                 classify: Callable[[Exception, str], Exception]) -> None:
        self.provider = provider.name
        self._classify = classify  # the SDK's exceptions as Retryable or ProviderError
        self.model = provider.model
        self.dims = getattr(provider, "requested_dims", None)
        self.client = client
        remote = getattr(provider, "settings", None)
        self._attempts = getattr(remote, "max_attempts", 6)
        self._initial = getattr(remote, "backoff_initial_s", 0.5)
        self._max = getattr(remote, "backoff_max_s", 30.0)
        self._budget = getattr(provider, "retry_budget", None)  # the run's, shared with sync calls
        # each attempt's wall-clock limit, first byte to last (a poll that drips its answer held a
        # run past every timeout, and its SIGTERM: audit I, M3); a transfer's grows with its size
        self.timeout_s = float(getattr(remote, "timeout_s", 60.0))

    def classify(self, exc: Exception) -> Exception:
        if isinstance(exc, Retryable | ProviderError | Abandoned):  # already ours (a limited call's)
            return exc
        return self._classify(exc, self.provider)

    def transfer_limit(self, size: int | None) -> float:
        """The longest one attempt to move a file of ``size`` bytes may take (unknown: the largest
        download's)."""
        size = capped_http.MAX_DOWNLOAD_BYTES if size is None else size
        return self.timeout_s + size / MIN_TRANSFER_BYTES_PER_S

    def limited(self, fn: Callable[[], T]) -> T:
        """One call, not retried, within ``remote.timeout_s`` (Retryable past it)."""
        return within(fn, self.timeout_s)

    def retry(self, fn: Callable[[], T], *, attempt_timeout_s: float | None = None,
              download: str | None = None) -> T:
        """``fn`` retried; each attempt within ``attempt_timeout_s`` (default ``remote.timeout_s``).
        ``download``: the file id ``fn`` reads; a response refused for its size raises
        :class:`OutputTooLarge` at once (it would be refused again)."""
        def once() -> T:
            try:
                return fn()
            except Exception as exc:
                cap = capped_http.over_cap(exc) if download else None
                if cap is not None and download:
                    raise self.too_large(download, None, cap) from None
                raise self.classify(exc) from None

        return call_with_retries(once, provider=f"{self.provider} batch", max_attempts=self._attempts,
                                 initial_s=self._initial, max_s=self._max, budget=self._budget,
                                 attempt_timeout_s=self.timeout_s if attempt_timeout_s is None else attempt_timeout_s)

    def too_large(self, file_id: str, size: int | None, cap: int) -> OutputTooLarge:
        def sized(n: int) -> str:
            return f"{n / MiB:,.0f} MiB" if n >= MiB else f"{n:,} bytes"

        said = sized(size) if size is not None else f"over {sized(cap)}"
        return OutputTooLarge(f"{self.provider} batch: output file {file_id} is {said}, more than a Batch API"
                              f" download may hold ({sized(cap)}): refused", file_id=file_id, size=size, cap=cap)

    def _size(self, fn: Callable[[], object]) -> int | None:
        """A file's size as the provider states it (None: not stated, or not readable)."""
        try:
            size = self.retry(fn)
        except ProviderError:
            return None
        try:
            return int(size) if size is not None else None  # type: ignore[call-overload]
        except (TypeError, ValueError):
            return None

    def _download(self, file_id: str, size: int | None, fn: Callable[[], bytes]) -> bytes:
        """Read a job file of ``size`` bytes (as stated): refused before a byte is read when it is
        over the cap; each attempt limited by its size."""
        cap = capped_http.MAX_DOWNLOAD_BYTES
        if size is not None and size > cap:
            raise self.too_large(file_id, size, cap)
        # over the cap with a size stated under it: a broken answer (an endless body), not a file too
        # large; retried, and left open for a later run when it stays broken
        return self.retry(fn, attempt_timeout_s=self.transfer_limit(size), download=file_id if size is None else None)

    def _remote(self, job: Any) -> RemoteJob:
        raise NotImplementedError

    def _find_in(self, jobs: Iterable[Any], local_id: str, input_file_id: str | None) -> RemoteJob | None:
        """The first of the provider's recent ``jobs`` (at most :data:`LOOKUP_JOBS`, newest first)
        submitted for ``local_id`` or reading ``input_file_id``: a job whose id a killed run never
        recorded."""
        for seen, job in enumerate(jobs, 1):
            r = self._remote(job)
            if r.local_id == local_id or (input_file_id and r.input_file_id == input_file_id):
                return r
            if seen >= LOOKUP_JOBS:
                break
        return None


# -- OpenAI and Voyage ------------------------------------------------------------------------

_OPENAI_STATUS = {
    "validating": st.PENDING, "in_progress": st.RUNNING, "finalizing": st.RUNNING, "cancelling": st.RUNNING,
    "completed": st.COMPLETED, "failed": st.FAILED, "expired": st.EXPIRED, "cancelled": st.CANCELLED,
    "canceled": st.CANCELLED,
}


class OpenAIBatchClient(_RetryingClient):
    """OpenAI's Files + Batches API through the ``openai`` SDK (:class:`VoyageBatchClient`
    drives Voyage's copy of it)."""

    completion_window = "24h"

    def __init__(self, provider: EmbeddingProvider, client: OpenAI, *,
                 classify: Callable[[Exception, str], Exception]) -> None:
        super().__init__(provider, client, classify=classify)
        remote_timeout = float(getattr(getattr(provider, "settings", None), "timeout_s", 60.0))
        self._long = client.with_options(timeout=max(600.0, remote_timeout))

    def request_line(self, custom_id: str, text: str) -> dict[str, object]:
        body: dict[str, Any] = {"model": self.model, "input": [text]}
        if self.dims:
            body["dimensions"] = self.dims
        return {"custom_id": custom_id, "method": "POST", "url": "/v1/embeddings", "body": body}

    def upload(self, path: str, local_id: str) -> str:
        def go() -> str:
            with open(path, "rb") as fh:
                return self._long.files.create(file=(f"{local_id}.jsonl", fh), purpose="batch").id

        return self.retry(go, attempt_timeout_s=self.transfer_limit(os.path.getsize(path)))

    def _remote(self, b: Any) -> RemoteJob:
        errors = getattr(b, "errors", None)
        data = getattr(errors, "data", None) or []
        # scrubbed before it is cut (a key across the cut would be half masked): a provider or a
        # proxy may echo the key in a job's error, which reaches the summary, logs, ledger, Prefect
        msg = scrub("; ".join(f"{e.code}: {e.message}" for e in data if e is not None))[:500]
        counts = getattr(b, "request_counts", None)
        meta = getattr(b, "metadata", None) or {}
        return RemoteJob(
            job_id=b.id, status=_OPENAI_STATUS.get(b.status, st.RUNNING), provider_status=b.status,
            output_file_id=b.output_file_id, error_file_id=b.error_file_id, error=msg,
            total=getattr(counts, "total", 0) or 0, done=getattr(counts, "completed", 0) or 0,
            failed=getattr(counts, "failed", 0) or 0, local_id=meta.get("memory_core_job"),
            input_file_id=getattr(b, "input_file_id", None),
        )

    def _create_extra(self) -> dict[str, object]:
        return {}

    def create(self, input_file_id: str, local_id: str) -> RemoteJob:
        kwargs: dict[str, Any] = {
            "input_file_id": input_file_id, "endpoint": "/v1/embeddings",
            "completion_window": self.completion_window, "metadata": {"memory_core_job": local_id},
            **self._create_extra(),
        }
        return self._remote(self.limited(lambda: self.client.batches.create(**kwargs)))

    def get(self, job_id: str) -> RemoteJob:
        return self._remote(self.limited(lambda: self.client.batches.retrieve(job_id)))

    def cancel(self, job_id: str) -> None:
        self.limited(lambda: self.client.batches.cancel(job_id))

    def find(self, local_id: str, input_file_id: str | None) -> RemoteJob | None:
        # retried as every other call: a transient error here must not read as "no such job"
        return self.retry(lambda: self._find_in(self.client.batches.list(limit=100), local_id, input_file_id))

    def download(self, file_id: str) -> bytes:
        size = self._size(lambda: self.client.files.retrieve(file_id).bytes)
        return self._download(file_id, size, lambda: self._long.files.content(file_id).content)

    def delete_file(self, file_id: str) -> None:
        self.limited(lambda: self.client.files.delete(file_id))

    def parse_line(self, obj: Any) -> ParsedLine:
        if not isinstance(obj, dict):
            return ParsedLine(None, kind="malformed", message="not a JSON object")
        cid = obj.get("custom_id")
        cid = cid if isinstance(cid, str) else None
        err = obj.get("error")
        if err:
            msg = err.get("message") if isinstance(err, dict) else str(err)
            code = err.get("code") if isinstance(err, dict) else None
            return ParsedLine(cid, kind="error", message=scrub(f"{code}: {msg}" if code else str(msg))[:300])
        resp = obj.get("response")
        if not isinstance(resp, dict):
            return ParsedLine(cid, kind="malformed", message="no response")
        status = resp.get("status_code")
        body = resp.get("body")
        if isinstance(status, int) and status >= 400:
            emsg = ""
            if isinstance(body, dict):
                e = body.get("error", body.get("detail"))
                emsg = e.get("message", "") if isinstance(e, dict) else str(e or "")
            return ParsedLine(cid, kind="http_error", message=scrub(f"HTTP {status}: {emsg}")[:300])
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list) or not data:
            return ParsedLine(cid, kind="bad_vector", message="empty embedding")
        # one input per line: exactly one item, index 0 (a duplicate or another index is refused)
        if len(data) != 1 or not isinstance(data[0], dict) or data[0].get("index", 0) != 0:
            return ParsedLine(cid, kind="bad_vector", message=f"{len(data)} items or an index other than 0 for one input")
        return ParsedLine(cid, vector=decode_vector(data[0].get("embedding")))


class VoyageBatchClient(OpenAIBatchClient):
    """Voyage's Batch API: OpenAI's shape at Voyage's base URL; the model and ``input_type`` go
    in ``request_params``, lines carry only ``custom_id`` and ``body.input``."""

    completion_window = "12h"

    def request_line(self, custom_id: str, text: str) -> dict[str, object]:
        return {"custom_id": custom_id, "body": {"input": [text]}}

    def _create_extra(self) -> dict[str, object]:
        params: dict[str, Any] = {"model": self.model, "input_type": "document"}
        if self.dims:
            params["output_dimension"] = self.dims
        return {"extra_body": {"request_params": params}}


# -- Gemini -----------------------------------------------------------------------------------

_GEMINI_STATUS = {
    "JOB_STATE_PENDING": st.PENDING, "JOB_STATE_QUEUED": st.PENDING, "JOB_STATE_RUNNING": st.RUNNING,
    "JOB_STATE_CANCELLING": st.RUNNING, "JOB_STATE_UPDATING": st.RUNNING, "JOB_STATE_PAUSED": st.RUNNING,
    "JOB_STATE_SUCCEEDED": st.COMPLETED, "JOB_STATE_PARTIALLY_SUCCEEDED": st.COMPLETED,
    "JOB_STATE_FAILED": st.FAILED, "JOB_STATE_CANCELLED": st.CANCELLED, "JOB_STATE_EXPIRED": st.EXPIRED,
}


class GeminiBatchClient(_RetryingClient):
    """Gemini's Batch API for embeddings through ``google-genai`` (file input, file output)."""

    completion_window = "48h"

    def __init__(self, provider: EmbeddingProvider, client: Any, *, task_type: str,
                 classify: Callable[[Exception, str], Exception]) -> None:
        super().__init__(provider, client, classify=classify)
        self.task_type = task_type

    def request_line(self, custom_id: str, text: str) -> dict[str, object]:
        req: dict[str, Any] = {"content": {"parts": [{"text": text}]}, "taskType": self.task_type}
        if self.dims:
            req["outputDimensionality"] = self.dims
        return {"key": custom_id, "request": req}

    def upload(self, path: str, local_id: str) -> str:
        from google.genai import types

        def go() -> str:
            f = self.client.files.upload(file=path, config=types.UploadFileConfig(
                mime_type="jsonl", display_name=local_id))
            if not f.name:
                raise ProviderError("gemini: the upload returned no file name")
            return str(f.name)

        return self.retry(go, attempt_timeout_s=self.transfer_limit(os.path.getsize(path)))

    def _remote(self, job: Any) -> RemoteJob:
        state = job.state.value if hasattr(job.state, "value") else str(job.state or "")
        dest = getattr(job, "dest", None)
        err = getattr(job, "error", None)
        msg = ""
        if err is not None:
            msg = scrub(str(getattr(err, "message", "") or err))[:500]  # (as OpenAI's: scrubbed, then cut)
        stats = getattr(job, "completion_stats", None)
        src = getattr(job, "src", None)
        return RemoteJob(
            job_id=str(job.name), status=_GEMINI_STATUS.get(state, st.RUNNING), provider_status=state,
            output_file_id=getattr(dest, "file_name", None) if dest is not None else None, error=msg,
            total=int(getattr(stats, "successful_count", 0) or 0) + int(getattr(stats, "failed_count", 0) or 0)
            if stats is not None else 0,
            local_id=getattr(job, "display_name", None), input_file_id=getattr(src, "file_name", None),
        )

    def create(self, input_file_id: str, local_id: str) -> RemoteJob:
        from google.genai import types

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "create_embeddings() is experimental"
            job = self.limited(lambda: self.client.batches.create_embeddings(
                model=self.model, src=types.EmbeddingsBatchJobSource(file_name=input_file_id),
                config=types.CreateEmbeddingsBatchJobConfig(display_name=local_id),
            ))
        return self._remote(job)

    def get(self, job_id: str) -> RemoteJob:
        return self._remote(self.limited(lambda: self.client.batches.get(name=job_id)))

    def cancel(self, job_id: str) -> None:
        self.limited(lambda: self.client.batches.cancel(name=job_id))

    def find(self, local_id: str, input_file_id: str | None) -> RemoteJob | None:
        return self.retry(lambda: self._find_in(self.client.batches.list(config={"page_size": 50}), local_id,
                                                input_file_id))

    def download(self, file_id: str) -> bytes:
        size = self._size(lambda: self.client.files.get(name=file_id).size_bytes)
        return self._download(file_id, size, lambda: bytes(self.client.files.download(file=file_id)))

    def delete_file(self, file_id: str) -> None:
        self.limited(lambda: self.client.files.delete(name=file_id))

    def parse_line(self, obj: Any) -> ParsedLine:
        if not isinstance(obj, dict):
            return ParsedLine(None, kind="malformed", message="not a JSON object")
        key = obj.get("key")
        key = key if isinstance(key, str) else None
        err = obj.get("error")
        if err:
            msg = err.get("message") if isinstance(err, dict) else str(err)
            return ParsedLine(key, kind="error", message=scrub(str(msg))[:300])
        resp = obj.get("response")
        emb = resp.get("embedding") if isinstance(resp, dict) else None
        values = emb.get("values") if isinstance(emb, dict) else None
        if not isinstance(values, list) or not values:
            return ParsedLine(key, kind="bad_vector", message="empty embedding")
        return ParsedLine(key, vector=values)


def client_for(provider: EmbeddingProvider) -> BatchClient:
    """The Batch API client for ``provider`` (which must have ``supports_batch``): the provider's own."""
    return provider.batch_client()


MAX_OUTPUT_LINE_BYTES = 8 * 1024 * 1024  # one input's line: a vector of 8k dims is ~170 KB of JSON


def parse_jsonl(data: bytes) -> Iterator[Any]:
    """Lines of a JSONL file, one at a time; an unparseable line becomes None (counted as
    malformed): invalid JSON, nesting deep enough to exhaust the parser's recursion (a
    RecursionError would escape, fail the run and leave the job in the ledger to be read again
    by every later run), or a line over :data:`MAX_OUTPUT_LINE_BYTES`. Lines end at ``\n``
    only (JSON escapes every other line break inside strings); the file is never copied whole."""
    start, n = 0, len(data)
    while start < n:
        end = data.find(b"\n", start)
        end = n if end < 0 else end
        if end - start > MAX_OUTPUT_LINE_BYTES:
            start = end + 1
            yield None
            continue
        raw = data[start:end].decode("utf-8", errors="replace")
        start = end + 1
        if not raw.strip():
            continue
        try:
            yield json.loads(raw)
        except (ValueError, RecursionError):
            yield None
