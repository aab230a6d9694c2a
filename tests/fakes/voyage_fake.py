"""Fake Voyage AI embeddings API (sync, as the ``voyageai`` SDK sends it) + OpenAI-shaped Batch API.

    with VoyageFake(dims=8) as srv:
        vo = voyageai.Client(api_key="pa-test", base_url=srv.base_url, max_retries=0)
        # srv.base_url == "http://127.0.0.1:<port>/v1" (no trailing slash, as voyageai requires)

The Batch API (files, batches with ``completion_window="12h"`` and ``request_params``, ISO-string
timestamps) is driven with the ``openai`` SDK or plain HTTP pointed at ``srv.base_url``.
Run standalone: ``python -m tests.fakes.voyage_fake --port 0 --dims 8`` prints ``READY <base_url>``.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from tests.fakes.common import (
    BatchItem,
    EmbedCall,
    OpenAICompatibleFake,
    RecordedRequest,
    Response,
    add_retry_headers,
    estimate_tokens,
    json_response,
    run_cli,
)

_DEFAULT_DETAIL: dict[int, str] = {
    400: "Invalid request.",
    401: "Provided API key is invalid.",
    403: "Forbidden.",
    404: "Not Found",
    422: "Malformed request.",
    429: "You have exceeded your rate limit (TPM/RPM). Please retry after a short wait.",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable: the server is overloaded or not ready yet.",
    504: "Gateway Timeout",
}

# max total tokens per request, by model (others: 120K)
_REQUEST_TOKENS: dict[str, int] = {
    "voyage-3.5-lite": 1_000_000,
    "voyage-4-lite": 1_000_000,
    "voyage-3.5": 320_000,
    "voyage-4": 320_000,
    "voyage-2": 320_000,
}


class VoyageFake(OpenAICompatibleFake):
    """Fake of api.voyageai.com/v1: ``POST /v1/embeddings`` + files + batches."""

    provider = "voyage"
    model_dims: ClassVar[dict[str, int]] = {
        m: 1024
        for m in (
            "voyage-4-large",
            "voyage-4",
            "voyage-4-lite",
            "voyage-3.5",
            "voyage-3.5-lite",
            "voyage-3-large",
            "voyage-code-3",
            "voyage-finance-2",
            "voyage-law-2",
        )
    }
    fallback_dims = 1024
    completion_windows: ClassVar[tuple[str, ...]] = ("12h",)
    expires_after: ClassVar[float] = 12 * 3600.0
    iso_times: ClassVar[bool] = True
    line_has_ids: ClassVar[bool] = False
    has_finalizing: ClassVar[bool] = False
    has_cancelling: ClassVar[bool] = False
    max_batch_requests: ClassVar[int] = 100_000
    max_batch_inputs: ClassVar[int] = 100_000

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.max_inputs = 1000
        self.context_tokens = 32_000
        self.max_request_tokens: int | None = None  # None: per-model table (120K default)

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
        h = dict(headers or {})
        add_retry_headers(h, retry_after, retry_after_ms)
        return json_response({"detail": message or _DEFAULT_DETAIL.get(status, f"HTTP {status}")}, status, h)

    def auth_error(self, key: str) -> Response:
        return self.error(401, "Provided API key is invalid.")

    def not_found(self, rec: RecordedRequest) -> Response:
        return self.error(404, "Not Found")

    def malformed_body(self) -> bytes:
        return b'{"object":"list","data":[{"object":"embedding","embedding":"AAAA'

    def usage(self, call: EmbedCall) -> dict[str, int]:
        return {"total_tokens": call.tokens}

    def request_token_limit(self, model: str) -> int:
        return self.max_request_tokens or _REQUEST_TOKENS.get(model, 120_000)

    # ---- embeddings ------------------------------------------------------------------------

    def parse_embed(self, body: Any, *, for_batch: dict[str, Any] | None = None) -> EmbedCall | Response:
        if not isinstance(body, dict):
            return self.error(422, "Request body must be a JSON object.")
        params = dict(body)
        if for_batch is not None:  # batch line: the model etc. come from request_params
            params = {**for_batch, **params}
        inp = params.get("input")
        if isinstance(inp, str):
            texts = [inp]
        elif isinstance(inp, list) and all(isinstance(x, str) for x in inp):
            texts = list(inp)
        else:
            return self.error(422, "Field 'input' must be a string or a list of strings.")
        if not texts:
            return self.error(400, "Input cannot be an empty list.")
        model = params.get("model")
        if not isinstance(model, str) or not model:
            return self.error(422, "Field 'model' is required.")
        if len(texts) > self.max_inputs:
            return self.error(
                400,
                f"The max allowed batch size is {self.max_inputs}, but {len(texts)} inputs were provided.",
            )
        input_type = params.get("input_type")
        if input_type not in (None, "query", "document"):
            return self.error(
                400,
                f"Value '{input_type}' supplied for argument 'input_type' is not valid -- accepted values are "
                "'query', 'document', and None.",
            )
        truncation = params.get("truncation", True)
        tokens = [estimate_tokens(t) for t in texts]
        if truncation is False:
            for n in tokens:
                if n > self.context_tokens:
                    return self.error(
                        400,
                        f"Request to model '{model}' failed. The input has {n} tokens, which exceeds the context "
                        f"length of {self.context_tokens}. Please set truncation=True or shorten the input.",
                    )
        tokens = [min(n, self.context_tokens) for n in tokens]
        total = sum(tokens)
        limit = self.request_token_limit(model)
        if total > limit:
            return self.error(
                400,
                f"Request to model '{model}' failed. The max allowed tokens per submitted batch is {limit}. "
                f"Your batch has {total} tokens after truncation. Please lower the number of tokens in the batch.",
            )
        out_dim = params.get("output_dimension")
        if out_dim is not None:
            if not isinstance(out_dim, int) or isinstance(out_dim, bool) or out_dim < 1:
                return self.error(400, f"Invalid output_dimension: {out_dim!r}.")
            if self.dims is None and out_dim not in (256, 512, 1024, 2048):
                return self.error(
                    400,
                    f"Value '{out_dim}' supplied for argument 'output_dimension' is not valid -- accepted values "
                    "are 256, 512, 1024, 2048.",
                )
        dtype = params.get("output_dtype")
        if dtype not in (None, "float"):
            return self.error(400, f"output_dtype '{dtype}' is not supported by the fake (float only).")
        encoding = params.get("encoding_format")
        if encoding not in (None, "base64"):
            return self.error(
                400, f"Value '{encoding}' supplied for argument 'encoding_format' is not valid."
            )
        dims = out_dim if out_dim is not None else self.default_dims(model)
        return EmbedCall(
            texts,
            model,
            dims,
            "base64" if encoding == "base64" else "float",
            total,
            {"input_type": input_type, "truncation": truncation},
        )

    # ---- batches ---------------------------------------------------------------------------

    def validate_batch_create(self, body: dict[str, Any]) -> Response | None:
        rp = body.get("request_params")
        if not isinstance(rp, dict) or not rp.get("model"):
            return self.error(400, "request_params.model is required for /v1/embeddings batches.")
        if rp.get("input_type") not in (None, "query", "document"):
            return self.error(400, f"Invalid request_params.input_type '{rp.get('input_type')}'.")
        return None

    def extra_batch_fields(self, job: Any) -> dict[str, Any]:
        return {"request_params": job.request.get("request_params")}

    def parse_batch_line(self, obj: Any, line_no: int, create: dict[str, Any]) -> BatchItem | dict[str, Any]:
        def bad(code: str, message: str, param: str | None = None) -> dict[str, Any]:
            return {"code": code, "line": line_no, "message": message, "param": param}

        if not isinstance(obj, dict):
            return bad("invalid_request", "Each line must be a JSON object.")
        cid = obj.get("custom_id")
        if not isinstance(cid, str) or not cid:
            return bad("missing_required_parameter", "Missing required parameter: 'custom_id'.", "custom_id")
        body = obj.get("body")
        if not isinstance(body, dict) or "input" not in body:
            return bad(
                "missing_required_parameter", "Missing required parameter: 'body.input'.", "body.input"
            )
        rp = create.get("request_params") or {}
        call = self.parse_embed(body, for_batch=rp)
        model = str(rp.get("model"))
        if isinstance(call, Response):
            inp = body.get("input")
            texts = (
                [inp]
                if isinstance(inp, str)
                else [t for t in inp if isinstance(t, str)]
                if isinstance(inp, list)
                else []
            )
            detail = str(json.loads(call.body)["detail"])
            return BatchItem(
                cid, texts, model, self.default_dims(model), line_no, error=(call.status, detail, None)
            )
        return BatchItem(cid, call.texts, call.model, call.dims, line_no, encoding="float", extra=call.extra)

    def http_error_body(self, status: int, message: str, code: str | None) -> dict[str, Any]:
        return {"detail": message}


def main(argv: list[str] | None = None) -> int:
    return run_cli(VoyageFake, argv)


if __name__ == "__main__":
    raise SystemExit(main())
