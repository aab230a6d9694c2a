# mypy: disallow-subclassing-any=False
# (the classes below subclass those of the httpx module an SDK uses, chosen at run time)
"""An httpx transport that caps what a provider's response may make us hold.

The SDKs read a whole response into memory and decode ``Content-Encoding: gzip`` on the way:
a 1 MB gzip bomb became 4 GB, an endless chunked body 2 GB (issue 22). :class:`CappedTransport`
asks for an uncompressed answer (``Accept-Encoding: identity``), and whatever comes back is
counted as it is read: a body over ``max_bytes`` (after decompression, when a server
compresses anyway: gzip and deflate are decoded here, with the same limit, anything else is
refused) ends the request with ``ResponseTooLarge``, a ``DecodingError`` that the
SDKs turn into a connection error: retried, then a clear provider error.
"""

from __future__ import annotations

import functools
import importlib
import zlib
from collections.abc import Iterator
from typing import Any

MAX_RESPONSE_BYTES = 256 * 1024 * 1024  # 2,048 inputs of 3,072-d floats as JSON text: ~130 MB
MAX_DOWNLOAD_BYTES = 8 * 1024 * 1024 * 1024  # a Batch API output file (OpenAI, Voyage: ``/files/<id>/content``;
# Gemini: ``/files/<id>:download``): a Gemini job at 3,072 dims holds ~50 KB of JSON a line
_CHUNK = 1 << 16


@functools.cache
def _classes(module: str) -> tuple[Any, Any]:
    """(ResponseTooLarge, CappedTransport) for the httpx module an SDK uses: ``httpx2`` (openai,
    mistralai) or ``httpx`` (google-genai); their requests and streams do not mix."""
    hx: Any = importlib.import_module(module)  # which httpx is known at run time only: its classes are Any

    class ResponseTooLarge(hx.DecodingError):
        """The body went past the cap (or used an encoding we did not ask for)."""

    class _Capped(hx.SyncByteStream):
        def __init__(self, inner: Any, encoding: str, max_bytes: int, request: Any) -> None:
            self.inner = inner
            self.max_bytes = max_bytes
            self.request = request
            self.decoder = (zlib.decompressobj(wbits=47) if encoding in ("gzip", "x-gzip")
                            else zlib.decompressobj() if encoding == "deflate" else None)

        def _too_large(self) -> Exception:
            exc = ResponseTooLarge(f"the response is larger than {self.max_bytes >> 20} MiB; refused",
                                   request=self.request)
            exc.over_cap = self.max_bytes  # (what :func:`over_cap` finds under the SDK's own error)
            return exc

        def __iter__(self) -> Iterator[bytes]:
            total = 0
            for chunk in self.inner:
                if self.decoder is None:
                    total += len(chunk)
                    if total > self.max_bytes:
                        raise self._too_large()
                    yield chunk
                    continue
                data = chunk
                while data:
                    try:
                        out = self.decoder.decompress(data, _CHUNK)
                    except zlib.error as exc:
                        raise ResponseTooLarge(f"cannot decode the response: {exc}", request=self.request) from None
                    total += len(out)
                    if total > self.max_bytes:
                        raise self._too_large()
                    if out:
                        yield out
                    data = self.decoder.unconsumed_tail
            if self.decoder is not None:
                out = self.decoder.flush(_CHUNK)
                if len(out) + total > self.max_bytes:
                    raise self._too_large()
                if out:
                    yield out

        def close(self) -> None:
            close = getattr(self.inner, "close", None)
            if close is not None:
                close()

    class CappedTransport(hx.HTTPTransport):
        """``HTTPTransport`` whose responses are at most ``max_bytes`` (decoded)."""

        def __init__(self, *, max_bytes: int = MAX_RESPONSE_BYTES, **kw: Any) -> None:
            super().__init__(**kw)
            self.max_bytes = max_bytes

        # Any: httpx or httpx2, chosen at run time
        def handle_request(self, request: Any) -> Any:
            request.headers["Accept-Encoding"] = "identity"
            response = super().handle_request(request)
            encoding = response.headers.get("Content-Encoding", "").strip().lower()
            if encoding not in ("", "identity", "gzip", "x-gzip", "deflate"):
                response.close()
                raise ResponseTooLarge(f"the response is encoded as {encoding!r}, which was not asked for",
                                       request=request)
            cap = MAX_DOWNLOAD_BYTES if is_download(request.url.path) else self.max_bytes
            headers = [(k, v) for k, v in response.headers.multi_items()
                       if k.lower() not in ("content-encoding", "content-length")]
            return hx.Response(status_code=response.status_code, headers=headers,
                               stream=_Capped(response.stream, encoding, cap, request),
                               extensions=response.extensions, request=request)

    return ResponseTooLarge, CappedTransport


def is_download(path: str) -> bool:
    """Whether ``path`` reads a Batch API output file: OpenAI's and Voyage's
    ``/files/<id>/content``, Gemini's ``/files/<id>:download`` (only the first had the download's
    cap, a Gemini job of a few thousand chunks at 3,072 dims could never be read: audit I, H3)."""
    return path.endswith("/content") or path.endswith(":download")


def over_cap(exc: BaseException | None) -> int | None:
    """The cap (bytes) a response went past, when ``exc`` or an error under it (an SDK wraps the
    transport's) is :class:`ResponseTooLarge` for its size; else None."""
    for _ in range(8):
        if exc is None:
            return None
        cap = getattr(exc, "over_cap", None)
        if isinstance(cap, int):
            return cap
        exc = exc.__cause__ or exc.__context__
    return None


# Any: the httpx family member is chosen at run time
def capped_transport(module: str = "httpx2", *, max_bytes: int = MAX_RESPONSE_BYTES) -> Any:
    """A transport for an ``httpx``-family client whose responses are capped."""
    return _classes(module)[1](max_bytes=max_bytes)


# Any: the httpx family member is chosen at run time
def capped_client(module: str = "httpx2", *, timeout: float, **kw: Any) -> Any:
    """A client of ``module`` through :func:`capped_transport` (for SDKs that take one)."""
    hx: Any = importlib.import_module(module)  # which httpx is known at run time only: its classes are Any
    return hx.Client(transport=capped_transport(module), timeout=timeout, **kw)
