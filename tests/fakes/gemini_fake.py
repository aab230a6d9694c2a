"""Fake Gemini Developer API (generativelanguage) for embeddings: sync, files, embedding batches.

    with GeminiFake(dims=8) as srv:
        client = genai.Client(api_key="g-test", http_options=types.HttpOptions(
            base_url=srv.base_url, api_version="v1beta"))

Serves every ``v1*`` version prefix (``/v1/``, ``/v1beta/``, ...). Vectors are L2-normalised only
when they have the model's full native size (3072 for gemini-embedding-001); otherwise they are
scaled by a per-text factor in [0.5, 1.5] (or ``scale``), so the client must normalise.
Run standalone: ``python -m tests.fakes.gemini_fake --port 0 --dims 8`` prints ``READY <base_url>``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from typing import Any, ClassVar

from tests.fakes.common import (
    BatchingFakeServer,
    BatchItem,
    BatchJob,
    Fault,
    ItemOutcome,
    RecordedRequest,
    Response,
    Route,
    StoredFile,
    apply_bad_payload,
    estimate_tokens,
    fake_vector,
    iso_time,
    json_response,
    new_id,
    run_cli,
    text_scale,
    truncated_line,
)

STATUS_NAMES: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}

_DEFAULT_MESSAGES: dict[int, str] = {
    400: "Request contains an invalid argument.",
    401: "Request had invalid authentication credentials.",
    403: "The caller does not have permission.",
    404: "Requested entity was not found.",
    429: "Resource has been exhausted (e.g. check quota).",
    500: "An internal error has occurred. Please retry or report in "
    "https://developers.generativeai.google/guide/troubleshooting",
    503: "The model is overloaded. Please try again later.",
    504: "The request timed out. Please try again.",
}

TASK_TYPES = frozenset(
    {
        "TASK_TYPE_UNSPECIFIED",
        "RETRIEVAL_QUERY",
        "RETRIEVAL_DOCUMENT",
        "SEMANTIC_SIMILARITY",
        "CLASSIFICATION",
        "CLUSTERING",
        "QUESTION_ANSWERING",
        "FACT_VERIFICATION",
        "CODE_RETRIEVAL_QUERY",
    }
)

BATCH_STATES: dict[str, str] = {
    "validating": "BATCH_STATE_PENDING",
    "in_progress": "BATCH_STATE_RUNNING",
    "finalizing": "BATCH_STATE_RUNNING",
    "cancelling": "BATCH_STATE_RUNNING",
    "completed": "BATCH_STATE_SUCCEEDED",
    "failed": "BATCH_STATE_FAILED",
    "expired": "BATCH_STATE_EXPIRED",
    "cancelled": "BATCH_STATE_CANCELLED",
}

_V = r"(?P<ver>v1[a-z0-9]*)"
_M = r"models/(?P<model>[^/:]+)"
_ID = r"(?P<id>[^/:]+)"


def content_text(content: Any) -> str | None:
    """Text of a Content (parts' texts concatenated); None if it has no parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, dict):
        return None
    parts = content.get("parts")
    if not isinstance(parts, list) or not parts:
        return None
    return "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))


def _pick(d: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if k in d and d[k] is not None:
            return d[k]
    return None


class GeminiFake(BatchingFakeServer):
    """Fake of generativelanguage.googleapis.com for embeddings (sync + Batch API)."""

    provider = "gemini"
    base_path = ""
    model_dims: ClassVar[dict[str, int]] = {
        "gemini-embedding-001": 3072,
        "gemini-embedding-exp-03-07": 3072,
        "text-embedding-004": 768,
        "embedding-001": 768,
    }
    fallback_dims = 3072
    has_finalizing: ClassVar[bool] = False
    has_cancelling: ClassVar[bool] = False
    reject_duplicate_ids: ClassVar[bool] = False

    def __init__(self, *, scale: float | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.scale = scale
        self.max_requests = 100

    # ---- envelope --------------------------------------------------------------------------

    def error(
        self,
        status: int,
        message: str | None = None,
        *,
        code: str | None = None,
        type_: str | None = None,
        param: str | None = None,
        retry_after: float | None = None,
        retry_after_ms: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        err: dict[str, Any] = {
            "code": status,
            "message": message or _DEFAULT_MESSAGES.get(status, f"HTTP {status}"),
            "status": code or STATUS_NAMES.get(status, "UNKNOWN"),
        }
        h = dict(headers or {})
        if retry_after is not None or retry_after_ms is not None:
            secs = retry_after if retry_after is not None else (retry_after_ms or 0) / 1000
            err["details"] = [
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{secs:g}s"}
            ]
            if retry_after is not None:
                h["Retry-After"] = (
                    str(int(retry_after)) if float(retry_after).is_integer() else str(retry_after)
                )
        return json_response({"error": err}, status, h)

    def not_found(self, rec: RecordedRequest) -> Response:
        return self.error(404, f"Method not found: {rec.method} {rec.path}")

    def malformed_body(self) -> bytes:
        return b'{"embeddings":[{"values":[0.01,'

    def check_auth(self, rec: RecordedRequest) -> Response | None:
        if self.api_key is None or "upload_id" in rec.query:
            return None
        key = rec.header("x-goog-api-key") or rec.query.get("key")
        if not key:
            return self.error(
                403,
                "Method doesn't allow unregistered callers (callers without established identity). "
                "Please use API Key or other form of API consumer identity to call this API.",
            )
        if key != self.api_key:
            return self.error(400, "API key not valid. Please pass a valid API key.")
        return None

    def vector_for(self, text: str, dims: int, model: str | None = None) -> list[float]:
        text = self.vector_text(text)
        v = fake_vector(text, dims)
        if dims == self.native_dims(model):
            return v
        f = self.scale if self.scale is not None else text_scale(text)
        return [x * f for x in v]

    # ---- routes ----------------------------------------------------------------------------

    def routes(self) -> list[Route]:
        return [
            Route("POST", rf"/{_V}/{_M}:batchEmbedContents", "embed", self._h_batch_embed),
            Route("POST", rf"/{_V}/{_M}:embedContent", "embed", self._h_embed_content),
            Route("POST", rf"/{_V}/{_M}:asyncBatchEmbedContent", "batch_create", self._h_batch_create),
            Route("GET", rf"/{_V}/batches", "batch_list", self._h_batch_list),
            Route("GET", rf"/{_V}/batches/{_ID}", "batch_get", self._h_batch_get),
            Route("POST", rf"/{_V}/batches/{_ID}:cancel", "batch_cancel", self._h_batch_cancel),
            Route("DELETE", rf"/{_V}/batches/{_ID}", "batch_delete", self._h_batch_delete),
            Route("POST", rf"/upload/{_V}/files", "file_upload", self._h_upload),
            Route("GET", rf"/{_V}/files", "file_list", self._h_file_list),
            Route("GET", rf"/{_V}/files/{_ID}", "file_get", self._h_file_get),
            Route("DELETE", rf"/{_V}/files/{_ID}", "file_delete", self._h_file_delete),
            Route("GET", rf"/{_V}/files/{_ID}:download", "file_content", self._h_download),
            Route("GET", rf"/download/{_V}/files/{_ID}:download", "file_content", self._h_download),
        ]

    # ---- sync embeddings -------------------------------------------------------------------

    def embed_inputs(self, rec: RecordedRequest) -> list[str]:
        body = rec.body if isinstance(rec.body, dict) else {}
        if rec.path.endswith(":embedContent"):
            t = content_text(body.get("content"))
            return [t] if t is not None else []
        reqs = body.get("requests")
        if not isinstance(reqs, list):
            return []
        out = []
        for r in reqs:
            t = content_text(r.get("content")) if isinstance(r, dict) else None
            if t is not None:
                out.append(t)
        return out

    def _parse_one(self, r: Any, model: str, where: str) -> tuple[str, int, str | None] | Response:
        if not isinstance(r, dict):
            return self.error(400, f"Invalid JSON payload received. {where} must be an object.")
        text = content_text(r.get("content"))
        if text is None:
            return self.error(400, f"* {where}.content.parts: contents.parts must not be empty.\n")
        req_model = r.get("model")
        if req_model is not None and req_model not in (model, f"models/{model}"):
            return self.error(
                400,
                f"* {where}.model: model in the request ({req_model}) does not match the model in the URL "
                f"(models/{model}).\n",
            )
        task = _pick(r, "taskType", "task_type")
        if task is not None and task not in TASK_TYPES:
            return self.error(
                400,
                f"Invalid value at '{where}.task_type' (type.googleapis.com/google.ai.generativelanguage."
                f'v1beta.TaskType), "{task}"',
            )
        dims = _pick(r, "outputDimensionality", "output_dimensionality")
        if dims is not None:
            if not isinstance(dims, int) or isinstance(dims, bool) or dims < 1:
                return self.error(400, f"* {where}.output_dimensionality: must be a positive integer.\n")
            if dims > self.native_dims(model):
                return self.error(
                    400, f"* {where}.output_dimensionality: must be at most {self.native_dims(model)}.\n"
                )
        return text, dims if dims is not None else self.default_dims(model), task

    def _h_batch_embed(self, rec: RecordedRequest, m: re.Match[str], fault: Fault | None) -> Response:
        body = rec.body
        reqs = body.get("requests") if isinstance(body, dict) else None
        if not isinstance(reqs, list):
            return self.error(400, "Invalid JSON payload received. Expected a 'requests' list.")
        if not reqs:
            return self.error(400, "* BatchEmbedContentsRequest.requests: contents is not specified\n")
        if len(reqs) > self.max_requests:
            return self.error(
                400,
                f"* BatchEmbedContentsRequest.requests: at most {self.max_requests} requests can be in one "
                "batch\n",
            )
        model = m["model"]
        parsed: list[tuple[str, int, str | None]] = []
        for i, r in enumerate(reqs):
            p = self._parse_one(r, model, f"BatchEmbedContentsRequest.requests[{i}]")
            if isinstance(p, Response):
                return p
            parsed.append(p)
        rec.info.update(
            {
                "model": model,
                "task_types": [p[2] for p in parsed],
                "dims": [p[1] for p in parsed],
                "version": m["ver"],
            }
        )
        vectors = [self.vector_for(t, d, model) for t, d, _ in parsed]
        pairs = apply_bad_payload(fault.kind if fault else None, vectors)
        self._bill_sync(t for t, _, _ in parsed)
        return json_response({"embeddings": [{"values": v} for _, v in pairs]})

    def _h_embed_content(self, rec: RecordedRequest, m: re.Match[str], fault: Fault | None) -> Response:
        model = m["model"]
        p = self._parse_one(rec.body, model, "EmbedContentRequest")
        if isinstance(p, Response):
            return p
        text, dims, task = p
        rec.info.update({"model": model, "task_types": [task], "dims": [dims], "version": m["ver"]})
        pairs = apply_bad_payload(fault.kind if fault else None, [self.vector_for(text, dims, model)])
        self._bill_sync([text])
        return json_response({"embedding": {"values": pairs[0][1]}} if pairs else {})

    # ---- files -----------------------------------------------------------------------------

    def file_object(self, f: StoredFile, ver: str = "v1beta") -> dict[str, Any]:
        obj: dict[str, Any] = {
            "name": f"files/{f.id}",
            "mimeType": f.mime_type,
            "sizeBytes": str(len(f.data)),
            "createTime": iso_time(f.created_at),
            "updateTime": iso_time(f.created_at),
            "expirationTime": iso_time(f.created_at + 48 * 3600),
            "sha256Hash": base64.b64encode(hashlib.sha256(f.data).hexdigest().encode()).decode(),
            "uri": f"{self.url}/{ver}/files/{f.id}",
            "state": "ACTIVE",
            "source": f.source,
        }
        if f.display_name:
            obj["displayName"] = f.display_name
        if f.source == "GENERATED":
            obj["downloadUri"] = f"{self.url}/download/{ver}/files/{f.id}:download?alt=media"
        return obj

    def _no_file(self, fid: str) -> Response:
        return self.error(403, f"You do not have permission to access the File {fid} or it may not exist.")

    def _h_upload(self, rec: RecordedRequest, m: re.Match[str], fault: Fault | None) -> Response:
        ver = m["ver"]
        upload_id = rec.query.get("upload_id")
        if upload_id:
            rec.body = None  # raw file bytes, not a JSON request
            with self.lock:
                f = self.files.get(upload_id)
            if f is None or f.complete:
                return self.error(404, "Upload session not found or already finalized.")
            command = (rec.header("x-goog-upload-command") or "").lower()
            offset = int(rec.header("x-goog-upload-offset") or 0)
            if offset != len(f.data):
                return self.error(400, f"Invalid upload offset {offset}; expected {len(f.data)}.")
            with self.lock:
                f.data += rec.raw
                if "finalize" in command:
                    f.complete = True
            if "finalize" in command:
                return json_response(
                    {"file": self.file_object(f, ver)},
                    headers={"x-goog-upload-status": "final", "X-GUploader-UploadID": f.id},
                )
            return Response(200, b"", {"x-goog-upload-status": "active", "X-GUploader-UploadID": f.id})
        if (rec.header("x-goog-upload-protocol") or "").lower() != "resumable" or (
            rec.header("x-goog-upload-command") or ""
        ).lower() != "start":
            return self.error(
                400, "The fake supports only the resumable upload protocol (start, upload+finalize)."
            )
        meta = rec.body.get("file") if isinstance(rec.body, dict) else None
        meta = meta if isinstance(meta, dict) else {}
        mime = (
            _pick(meta, "mimeType", "mime_type")
            or rec.header("x-goog-upload-header-content-type")
            or ("application/octet-stream")
        )
        size = _pick(meta, "sizeBytes", "size_bytes") or rec.header("x-goog-upload-header-content-length")
        name = _pick(meta, "name")
        f = self.add_file(
            b"",
            _pick(meta, "displayName", "display_name") or "upload",
            "upload",
            prefix="",
            mime_type=str(mime),
            display_name=_pick(meta, "displayName", "display_name"),
            complete=False,
            expected_size=int(size) if size is not None else None,
        )
        if name:
            fid = str(name).removeprefix("files/")
            with self.lock:
                if fid in self.files:
                    self.files.pop(f.id)
                    return self.error(409, f"File files/{fid} already exists.")
                self.files.pop(f.id)
                f.id = fid
                self.files[fid] = f
        upload_url = f"{self.url}/upload/{ver}/files?upload_id={f.id}&upload_protocol=resumable"
        return Response(
            200,
            b"",
            {
                "x-goog-upload-url": upload_url,
                "x-goog-upload-status": "active",
                "x-goog-upload-chunk-granularity": "8388608",
                "X-GUploader-UploadID": f.id,
                "Content-Type": "application/json",
            },
        )

    def _h_file_list(self, rec: RecordedRequest, m: re.Match[str], fault: Fault | None) -> Response:
        with self.lock:
            files = [self.file_object(f, m["ver"]) for f in self.files.values() if f.complete]
        return json_response({"files": files} if files else {})

    def _h_file_get(self, rec: RecordedRequest, m: re.Match[str], fault: Fault | None) -> Response:
        with self.lock:
            f = self.files.get(m["id"])
        if f is None or not f.complete:
            return self._no_file(m["id"])
        return json_response(self.file_object(f, m["ver"]))

    def _h_file_delete(self, rec: RecordedRequest, m: re.Match[str], fault: Fault | None) -> Response:
        with self.lock:
            f = self.files.pop(m["id"], None)
        return json_response({}) if f else self._no_file(m["id"])

    def _h_download(self, rec: RecordedRequest, m: re.Match[str], fault: Fault | None) -> Response:
        with self.lock:
            f = self.files.get(m["id"])
        if f is None or not f.complete:
            return self._no_file(m["id"])
        return Response(200, f.data, {"Content-Type": "application/octet-stream"})

    # ---- batches ---------------------------------------------------------------------------

    def _job_key(self, job_id: str) -> str:
        return job_id if job_id.startswith("batches/") else f"batches/{job_id}"

    def _item_from_request(self, r: Any, key: str, line: int, model: str, has_key: bool) -> BatchItem:
        extra: dict[str, Any] = {"no_key": not has_key}
        if not isinstance(r, dict):
            return BatchItem(
                key,
                [],
                model,
                self.default_dims(model),
                line,
                extra=extra,
                error=(400, "Each line must carry a 'request' object.", "INVALID_ARGUMENT"),
            )
        p = self._parse_one(r, model, "request")
        if isinstance(p, Response):
            err = json.loads(p.body)["error"]
            text = content_text(r.get("content"))
            return BatchItem(
                key,
                [text] if text is not None else [],
                model,
                self.default_dims(model),
                line,
                extra=extra,
                error=(err["code"], err["message"], err["status"]),
            )
        text, dims, task = p
        extra["task_type"] = task
        return BatchItem(key, [text], model, dims, line, extra=extra)

    def _h_batch_create(self, rec: RecordedRequest, m: re.Match[str], fault: Fault | None) -> Response:
        model = m["model"]
        body = rec.body
        batch = body.get("batch") if isinstance(body, dict) else None
        if not isinstance(batch, dict):
            return self.error(400, "Invalid JSON payload received. Expected a 'batch' object.")
        ic = _pick(batch, "inputConfig", "input_config")
        if not isinstance(ic, dict):
            return self.error(400, "* batch.input_config: input_config is required.\n")
        fname = _pick(ic, "fileName", "file_name")
        inline = _pick(ic, "requests")
        job = BatchJob(
            id=f"batches/{new_id('', 20)}",
            created_at=time.time(),
            items=[],
            fault=self._next_job_fault(),
            model=model,
            endpoint=f"models/{model}:asyncBatchEmbedContent",
            completion_window="48h",
            request=body,
            display_name=_pick(batch, "displayName", "display_name"),
            inline=fname is None,
        )
        if fname:
            fid = str(fname).removeprefix("files/")
            with self.lock:
                f = self.files.get(fid)
            if f is None or not f.complete:
                return self._no_file(fid)
            job.input_file_id = f"files/{fid}"
            for n, line in enumerate(f.data.decode("utf-8", "replace").splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    job.items.append(
                        BatchItem(
                            f"__line{n}",
                            [],
                            model,
                            self.default_dims(model),
                            n,
                            extra={"no_key": True},
                            error=(400, f"Line {n} is not valid JSON.", "INVALID_ARGUMENT"),
                        )
                    )
                    continue
                key = obj.get("key") if isinstance(obj, dict) else None
                has_key = isinstance(key, str) and bool(key)
                req = obj.get("request") if isinstance(obj, dict) else None
                job.items.append(
                    self._item_from_request(req, key if has_key else f"__line{n}", n, model, has_key)
                )
        elif inline is not None:
            reqs = inline.get("requests") if isinstance(inline, dict) else inline
            if not isinstance(reqs, list):
                return self.error(400, "* batch.input_config.requests: expected a list of requests.\n")
            for i, r in enumerate(reqs):
                inner = r.get("request", r) if isinstance(r, dict) else r
                job.items.append(self._item_from_request(inner, str(i), i + 1, model, False))
        else:
            return self.error(400, "* batch.input_config: one of file_name or requests is required.\n")
        if not job.items:
            job.validation_errors.append(
                {"code": "empty_input", "line": None, "message": "The batch input is empty.", "param": None}
            )
        self.register_job(job)
        return json_response(self.operation(job, m["ver"]))

    def operation(self, job: BatchJob, ver: str = "v1beta") -> dict[str, Any]:
        total = len(job.items)
        stats: dict[str, str] = {"requestCount": str(total)}
        if job.done:
            stats["successfulRequestCount"] = str(job.completed_count)
            stats["failedRequestCount"] = str(job.failed_count)
            stats["pendingRequestCount"] = "0"
        else:
            stats["pendingRequestCount"] = str(total)
        last = max([job.created_at, *job.times.values()])
        ic: dict[str, Any] = {"fileName": job.input_file_id} if job.input_file_id else {"requests": {}}
        meta: dict[str, Any] = {
            "@type": "type.googleapis.com/google.ai.generativelanguage.v1main.EmbedContentBatch",
            "model": f"models/{job.model}",
            "displayName": job.display_name or "",
            "inputConfig": ic,
            "createTime": iso_time(job.created_at),
            "updateTime": iso_time(last),
            "batchStats": stats,
            "state": BATCH_STATES[job.status],
            "name": job.id,
        }
        if job.done:
            meta["endTime"] = iso_time(last)
        output: dict[str, Any] | None = None
        if job.output_file_id:
            output = {"responsesFile": f"files/{job.output_file_id}"}
        elif job.inline and job.status == "completed":
            output = {"inlinedResponses": {"inlinedResponses": job.inline_responses}}
        if output is not None:
            meta["output"] = output
        op: dict[str, Any] = {"name": job.id, "metadata": meta}
        if job.done:
            op["done"] = True
            if output is not None:
                op["response"] = {
                    "@type": "type.googleapis.com/google.ai.generativelanguage.v1main.EmbedContentBatchOutput",
                    **output,
                }
            if job.status == "failed":
                msg = "; ".join(str(e.get("message")) for e in job.validation_errors) or "Batch failed."
                op["error"] = {"code": 13, "message": msg}
        return op

    def _h_batch_get(self, rec: RecordedRequest, m: re.Match[str], fault: Fault | None) -> Response:
        with self.lock:
            job = self.jobs.get(self._job_key(m["id"]))
            if job is None:
                return self.error(404, f"Batch batches/{m['id']} not found.")
            job.polls += 1
            self._advance(job)
            return json_response(self.operation(job, m["ver"]))

    def _h_batch_list(self, rec: RecordedRequest, m: re.Match[str], fault: Fault | None) -> Response:
        with self.lock:
            jobs = list(reversed(self.jobs.values()))
            for j in jobs:
                self._advance(j)
            ops = [self.operation(j, m["ver"]) for j in jobs]
        return json_response({"operations": ops} if ops else {})

    def _h_batch_cancel(self, rec: RecordedRequest, m: re.Match[str], fault: Fault | None) -> Response:
        with self.lock:
            job = self.jobs.get(self._job_key(m["id"]))
            if job is None:
                return self.error(404, f"Batch batches/{m['id']} not found.")
            self._advance(job)
            if job.done:
                return self.error(
                    400, f"Batch {job.id} is already in a terminal state.", code="FAILED_PRECONDITION"
                )
            self.request_cancel(job)
        return json_response({})

    def _h_batch_delete(self, rec: RecordedRequest, m: re.Match[str], fault: Fault | None) -> Response:
        with self.lock:
            job = self.jobs.pop(self._job_key(m["id"]), None)
        if job is None:
            return self.error(404, f"Batch batches/{m['id']} not found.")
        return json_response({})

    # ---- output rendering ------------------------------------------------------------------

    def _error_obj(self, o: ItemOutcome) -> dict[str, Any]:
        if o.kind == "expired":
            return {"code": 504, "message": o.message or "Expired.", "status": "DEADLINE_EXCEEDED"}
        if o.kind == "cancelled":
            return {"code": 499, "message": o.message or "Cancelled.", "status": "CANCELLED"}
        if o.kind == "http_error":
            status = o.code if o.code and o.code.isupper() else STATUS_NAMES.get(o.status, "UNKNOWN")
            return {"code": o.status, "message": o.message or "error", "status": status}
        return {"code": 500, "message": o.message or "Internal error.", "status": "INTERNAL"}

    def _response_obj(self, job: BatchJob, o: ItemOutcome) -> dict[str, Any]:
        item = o.item
        text = item.texts[0] if item.texts else ""
        vec: list[float] | None = self.vector_for(text, item.dims, item.model)
        if o.kind == "bad_vector":
            vec = self.bad_vector(job.fault.bad_vector, vec or [])
        resp: dict[str, Any] = {"tokenCount": str(estimate_tokens(text))}
        if vec is not None:
            resp["embedding"] = {"values": vec}
        return resp

    def render_outputs(self, job: BatchJob, outcomes: list[ItemOutcome]) -> None:
        if job.inline:
            by_item = {id(o.item): o for o in outcomes if o.kind not in ("duplicate", "unknown")}
            responses: list[dict[str, Any]] = []
            for item in job.items:
                o = by_item.get(id(item))
                if o is None:
                    continue
                if o.kind in ("ok", "malformed", "bad_vector"):
                    responses.append({"response": self._response_obj(job, o)})
                else:
                    responses.append({"error": self._error_obj(o)})
            job.inline_responses = responses
            return
        lines: list[str] = []
        for o in outcomes:
            if o.kind in ("expired", "cancelled"):
                continue  # unfinished requests of an expired/cancelled job are simply absent
            key: dict[str, Any] = {} if o.item.extra.get("no_key") else {"key": o.item.custom_id}
            if o.kind in ("ok", "duplicate", "unknown", "malformed", "bad_vector"):
                obj = {"response": self._response_obj(job, o), **key}
                lines.append(
                    truncated_line(obj) if o.kind == "malformed" else json.dumps(obj, separators=(",", ":"))
                )
            else:
                lines.append(json.dumps({"error": self._error_obj(o), **key}, separators=(",", ":")))
        if lines or job.status == "completed":
            f = self.add_file(
                ("\n".join(lines) + "\n").encode() if lines else b"",
                f"{job.id}-responses.jsonl",
                "batch_output",
                prefix="batch-",
                source="GENERATED",
                mime_type="application/jsonl",
            )
            job.output_file_id = f.id


def main(argv: list[str] | None = None) -> int:
    return run_cli(GeminiFake, argv)


if __name__ == "__main__":
    raise SystemExit(main())
