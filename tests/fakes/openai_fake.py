"""Fake OpenAI embeddings + Files + Batches API (what the ``openai`` SDK talks to).

    with OpenAIFake(dims=8) as srv:
        client = openai.OpenAI(api_key="sk-test", base_url=srv.base_url, max_retries=0)

Run standalone: ``python -m tests.fakes.openai_fake --port 0 --dims 8 [--delay S] [--log FILE]``
prints ``READY <base_url>``.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from tests.fakes.common import (
    BatchItem,
    EmbedCall,
    OpenAICompatibleFake,
    Response,
    add_retry_headers,
    json_response,
    normalise_input,
    run_cli,
)

_DEFAULT_MESSAGES: dict[int, tuple[str, str, str | None]] = {
    # status: (message, type, code)
    400: ("Invalid request.", "invalid_request_error", None),
    401: (
        "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.",
        "invalid_request_error",
        "invalid_api_key",
    ),
    403: ("You are not allowed to access this resource.", "invalid_request_error", None),
    404: ("The requested resource does not exist.", "invalid_request_error", None),
    408: ("Request timed out.", "server_error", None),
    409: ("Conflict.", "invalid_request_error", None),
    429: (
        "Rate limit reached for text-embedding-3-small in organization org-fake on tokens per min (TPM): "
        "Limit 1000000, Used 1000000, Requested 10. Please try again in 1s.",
        "tokens",
        "rate_limit_exceeded",
    ),
    500: ("The server had an error while processing your request. Sorry about that!", "server_error", None),
    502: ("Bad gateway.", "server_error", None),
    503: ("The engine is currently overloaded, please try again later.", "server_error", None),
    504: ("Gateway timeout.", "server_error", None),
}


class OpenAIFake(OpenAICompatibleFake):
    """Fake of api.openai.com/v1 for embeddings (sync and Batch API)."""

    provider = "openai"
    model_dims: ClassVar[dict[str, int]] = {
        "text-embedding-3-small": 1536,
        "text-embedding-3-large": 3072,
        "text-embedding-ada-002": 1536,
    }
    fallback_dims = 1536

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.max_inputs = 2048
        self.max_input_tokens = 8192
        self.max_request_tokens = 300_000

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
        d_msg, d_type, d_code = _DEFAULT_MESSAGES.get(
            status, (f"HTTP {status}", "server_error" if status >= 500 else "invalid_request_error", None)
        )
        h = dict(headers or {})
        add_retry_headers(h, retry_after, retry_after_ms)
        h.setdefault("x-request-id", "req_fake_error")
        body = {
            "error": {
                "message": message or d_msg,
                "type": type_ or d_type,
                "param": param,
                "code": code if code is not None else d_code,
            }
        }
        return json_response(body, status, h)

    def auth_error(self, key: str) -> Response:
        shown = (key[:3] + "*" * 8 + key[-4:]) if len(key) > 8 else key
        return self.error(
            401,
            f"Incorrect API key provided: {shown}. You can find your API key at "
            "https://platform.openai.com/account/api-keys.",
            code="invalid_api_key",
        )

    def malformed_body(self) -> bytes:
        return b'{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.01,'

    # ---- embeddings ------------------------------------------------------------------------

    def parse_embed(self, body: Any, *, for_batch: dict[str, Any] | None = None) -> EmbedCall | Response:
        if not isinstance(body, dict):
            return self.error(
                400,
                "We could not parse the JSON body of your request. (HINT: This likely means you aren't using "
                "your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not "
                "valid JSON.)",
            )
        model = body.get("model")
        if not model or not isinstance(model, str):
            return self.error(400, "you must provide a model parameter")
        texts, tokens = normalise_input(body.get("input"))
        invalid = "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference."
        if texts is None or any(t == "" for t in texts):
            return self.error(400, invalid)
        if len(texts) > self.max_inputs:
            return self.error(
                400,
                f"'$.input' is too long. Maximum length is {self.max_inputs}, but got {len(texts)} items.",
                param="input",
            )
        for n in tokens:
            if n > self.max_input_tokens:
                return self.error(
                    400,
                    f"This model's maximum context length is {self.max_input_tokens} tokens, however you requested "
                    f"{n} tokens ({n} in your prompt; 0 for the completion). Please reduce your prompt; or "
                    "completion length.",
                )
        total = sum(tokens)
        if total > self.max_request_tokens:
            return self.error(
                400,
                f"Requested {total} tokens, max {self.max_request_tokens} tokens per request",
                type_="max_tokens_per_request",
                code="max_tokens_per_request",
            )
        dims_req = body.get("dimensions")
        if dims_req is not None:
            if model == "text-embedding-ada-002":
                return self.error(
                    400, "This model does not support specifying dimensions.", param="dimensions"
                )
            if not isinstance(dims_req, int) or isinstance(dims_req, bool) or dims_req < 1:
                return self.error(
                    400,
                    f"Invalid value for 'dimensions' = {dims_req}. Must be greater than or equal to 1.",
                    param="dimensions",
                )
            if dims_req > self.native_dims(model):
                return self.error(
                    400,
                    f"This model does not support specifying dimensions larger than {self.native_dims(model)}.",
                    param="dimensions",
                )
        encoding = body.get("encoding_format") or "float"
        if encoding not in ("float", "base64"):
            return self.error(
                400,
                f"Invalid value for 'encoding_format': '{encoding}'. Must be 'float' or 'base64'.",
                param="encoding_format",
            )
        dims = dims_req if dims_req is not None else self.default_dims(model)
        return EmbedCall(texts, model, dims, encoding, total)

    # ---- batch lines -----------------------------------------------------------------------

    def parse_batch_line(self, obj: Any, line_no: int, create: dict[str, Any]) -> BatchItem | dict[str, Any]:
        def bad(code: str, message: str, param: str | None = None) -> dict[str, Any]:
            return {"code": code, "line": line_no, "message": message, "param": param}

        if not isinstance(obj, dict):
            return bad("invalid_request", "Each line must be a JSON object.")
        cid = obj.get("custom_id")
        if not isinstance(cid, str) or not cid:
            return bad("missing_required_parameter", "Missing required parameter: 'custom_id'.", "custom_id")
        if obj.get("method") != "POST":
            return bad("invalid_method", "The 'method' of each request must be 'POST'.", "method")
        if obj.get("url") != create.get("endpoint"):
            return bad(
                "mismatched_endpoint",
                f"The url '{obj.get('url')}' does not match the batch endpoint '{create.get('endpoint')}'.",
                "url",
            )
        body = obj.get("body")
        if not isinstance(body, dict):
            return bad("missing_required_parameter", "Missing required parameter: 'body'.", "body")
        if not body.get("model"):
            return bad(
                "missing_required_parameter", "Missing required parameter: 'body.model'.", "body.model"
            )
        call = self.parse_embed(body)
        if isinstance(call, Response):
            # request-level problems surface per line (in the error file), like a failed sync call
            err = json.loads(call.body)["error"]
            texts = normalise_input(body.get("input"))[0] or []
            return BatchItem(
                cid,
                texts,
                str(body.get("model")),
                self.default_dims(str(body.get("model"))),
                line_no,
                error=(call.status, err["message"], err.get("code")),
            )
        return BatchItem(cid, call.texts, call.model, call.dims, line_no, encoding=call.encoding)


def main(argv: list[str] | None = None) -> int:
    return run_cli(OpenAIFake, argv)


if __name__ == "__main__":
    raise SystemExit(main())
