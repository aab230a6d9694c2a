"""Fake Mistral embeddings API (``POST /v1/embeddings``, as the ``mistralai`` SDK sends it).

    with MistralFake(dims=8) as srv:
        client = mistralai.client.Mistral(api_key="k", server_url=srv.url)  # the SDK adds /v1/embeddings

Shapes follow api.mistral.ai: the request's ``input`` (a string or a list of strings),
``model``, optional ``output_dimension`` / ``output_dtype`` / ``encoding_format``; the answer
``{"id","object":"list","data":[{"object":"embedding","embedding","index"}],"model","usage"}``.
Errors use Mistral's flat envelope ``{"object":"error","message","type","param","code"}``; a
bad key gets the gateway's ``{"message":"Unauthorized","request_id"}`` with 401.

Limits enforced as the real API words them: 512 inputs a request ("Too many inputs in request,
split into more batches.", code 3210), 16,384 tokens a request ("Too many tokens in batch. Max
is 16384 got N"), 8,192 tokens an input. Tokens are estimated as ceil(len/4) unless
``chars_per_token`` says otherwise (a lower figure plays a tokenizer that counts more tokens
than the client's estimate).

Rate limit: ``requests_per_second = N`` answers a request over N in the last second with 429
``{"message":"Requests rate limit exceeded","type":"rate_limited","code":"1300"}`` and the
``ratelimitbysize-*`` / ``x-ratelimitbysize-*`` headers the API sends; ``fail_next(status=429)``
injects one as well. The other faults of tests/fakes/common.py (malformed, close, reset, slow,
hang, bad payloads) apply as for every fake.
Run standalone: ``python -m tests.fakes.mistral_fake --port 0 --dims 8`` prints ``READY <base_url>``.
"""

from __future__ import annotations

import math
import re
import time
from collections import deque
from typing import Any, ClassVar

from tests.fakes.common import (
    EmbedCall,
    Fault,
    OpenAICompatibleFake,
    RecordedRequest,
    Response,
    Route,
    add_retry_headers,
    json_response,
    new_id,
    run_cli,
)

_DEFAULT_MESSAGE: dict[int, str] = {
    400: "Invalid request",
    404: "Not Found",
    422: "Unprocessable entity",
    429: "Requests rate limit exceeded",
    500: "Internal server error",
    502: "Bad gateway",
    503: "Service unavailable",
    504: "Gateway timeout",
}
_TYPES: dict[int, str] = {400: "invalid_request_error", 422: "invalid_request_error", 429: "rate_limited"}


class MistralFake(OpenAICompatibleFake):
    """Fake of api.mistral.ai: ``POST /v1/embeddings`` only (no batch API)."""

    provider = "mistral"
    model_dims: ClassVar[dict[str, int]] = {"mistral-embed": 1024, "codestral-embed": 1536}
    fallback_dims = 1024
    max_output_dims: ClassVar[dict[str, int]] = {"codestral-embed": 3072}

    def __init__(self, *, requests_per_second: float | None = None, chars_per_token: float = 4.0,
                 **kw: Any) -> None:
        super().__init__(**kw)
        self.max_inputs = 512
        self.max_request_tokens = 16_384
        self.max_input_tokens = 8192
        self.chars_per_token = chars_per_token
        self.requests_per_second = requests_per_second
        self.tokens_per_minute_limit = 500_000
        self._recent: deque[float] = deque()
        self.rate_limited = 0  # requests answered 429 by the rate limiter

    def routes(self) -> list[Route]:
        return [Route("POST", r"/v1/embeddings", "embed", self._h_embed)]

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
        if status == 429:
            code = code or "1300"
            h.update(self._rate_headers(remaining=0))
        body = {
            "object": "error",
            "message": message or _DEFAULT_MESSAGE.get(status, f"HTTP {status}"),
            "type": type_ or _TYPES.get(status, "api_error"),
            "param": param,
            "code": code,
        }
        return json_response(body, status, h)

    def _rate_headers(self, remaining: int) -> dict[str, str]:
        limit = str(self.tokens_per_minute_limit)
        return {
            "ratelimitbysize-limit": limit,
            "ratelimitbysize-remaining": str(remaining),
            "ratelimitbysize-reset": "60",
            "x-ratelimitbysize-limit-minute": limit,
            "x-ratelimitbysize-remaining-minute": str(remaining),
        }

    def auth_error(self, key: str) -> Response:
        return json_response({"message": "Unauthorized", "request_id": new_id()}, 401)

    def not_found(self, rec: RecordedRequest) -> Response:
        return json_response({"detail": "Not Found"}, 404)

    def malformed_body(self) -> bytes:
        return b'{"id":"x","object":"list","data":[{"object":"embedding","embedding":[0.1,'

    def usage(self, call: EmbedCall) -> dict[str, int]:
        return {"prompt_tokens": call.tokens, "total_tokens": call.tokens, "completion_tokens": 0}

    def tokens(self, text: str) -> int:
        return max(1, math.ceil(len(text) / self.chars_per_token))

    # ---- embeddings ------------------------------------------------------------------------

    def _h_embed(self, rec: RecordedRequest, m: re.Match[str], fault: Fault | None) -> Response:
        if self.requests_per_second is not None:
            now = time.monotonic()
            with self.lock:
                while self._recent and now - self._recent[0] >= 1.0:
                    self._recent.popleft()
                if len(self._recent) >= self.requests_per_second:
                    self.rate_limited += 1
                    return self.error(429)
                self._recent.append(now)
        resp = super()._h_embed(rec, m, fault)
        if resp.status == 200:
            resp.headers.update(self._rate_headers(remaining=self.tokens_per_minute_limit))
        return resp

    def render_embed(self, call: EmbedCall, pairs: list[tuple[int, list[float]]]) -> dict[str, Any]:
        body = super().render_embed(call, pairs)
        return {"id": new_id(), **body}

    def parse_embed(self, body: Any, *, for_batch: dict[str, Any] | None = None) -> EmbedCall | Response:
        if not isinstance(body, dict):
            return self.error(422, "Request body must be a JSON object")
        inp = body.get("input")
        if isinstance(inp, str):
            texts = [inp]
        elif isinstance(inp, list) and all(isinstance(x, str) for x in inp):
            texts = list(inp)
        else:
            return self.error(422, "input: Input should be a valid string or list of strings", param="input")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return self.error(422, "model: Field required", param="model")
        if model not in self.model_dims:
            return self.error(400, f"Invalid model: {model}", code="1500")
        if not texts:
            return self.error(400, "Input cannot be empty", code="3210")
        if len(texts) > self.max_inputs:
            return self.error(400, "Too many inputs in request, split into more batches.", code="3210")
        tokens = [self.tokens(t) for t in texts]
        for n in tokens:
            if n > self.max_input_tokens:
                return self.error(400, f"Too many tokens overall, split into more batches. Max is "
                                       f"{self.max_input_tokens} tokens per input, got {n}", code="3210")
        total = sum(tokens)
        if total > self.max_request_tokens:
            return self.error(400, f"Too many tokens in batch. Max is {self.max_request_tokens} got {total}")
        encoding = body.get("encoding_format")
        if encoding not in (None, "float", "base64"):
            return self.error(422, f"encoding_format: Input should be 'float' or 'base64', got {encoding!r}")
        dtype = body.get("output_dtype")
        if dtype not in (None, "float"):
            return self.error(400, f"output_dtype {dtype!r} is not supported by the fake (float only)")
        out_dim = body.get("output_dimension")
        if out_dim is not None:
            top = self.max_output_dims.get(model)
            if top is None:
                return self.error(400, f"output_dimension is not supported for model {model}")
            if not isinstance(out_dim, int) or isinstance(out_dim, bool) or not 1 <= out_dim <= top:
                return self.error(400, f"output_dimension must be between 1 and {top}")
        dims = out_dim if out_dim is not None else self.default_dims(model)
        return EmbedCall(texts, model, dims, "base64" if encoding == "base64" else "float", total, {})


def main(argv: list[str] | None = None) -> int:
    return run_cli(MistralFake, argv)


if __name__ == "__main__":
    raise SystemExit(main())
