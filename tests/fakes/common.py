"""Shared machinery for the fake embedding-provider HTTP servers.

Everything here is stdlib only: a ``ThreadingHTTPServer`` on 127.0.0.1 in a daemon thread, a
thread-safe request log, scripted fault injection, deterministic fake embeddings and a generic
batch-job engine (files, job lifecycle, per-job faults, output planning) that the OpenAI, Voyage
and Gemini fakes render in their own wire formats.

Request kinds (used by the request log and as the ``on=`` target of fault injection):
``embed`` (sync embedding call), ``file_upload``, ``file_get``, ``file_list``, ``file_delete``,
``file_content`` (download), ``batch_create``, ``batch_get``, ``batch_list``, ``batch_cancel``,
``batch_delete``, ``other`` (unknown route, answered 404).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import functools
import hashlib
import json
import math
import os
import random
import re
import signal
import socket
import struct
import sys
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Literal
from urllib.parse import parse_qs, urlsplit

# --------------------------------------------------------------------------------------------
# Deterministic embeddings
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=65536)
def _unit_vector(text: str, dims: int) -> tuple[float, ...]:
    if dims <= 0:
        return ()
    seed = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
    stream = hashlib.shake_256(seed).digest(4 * dims)
    raw = [u / 2147483648.0 - 1.0 for u in struct.unpack(f"<{dims}I", stream)]
    norm = math.sqrt(sum(v * v for v in raw)) or 1.0
    # Round through float32 so the float-JSON and base64 encodings carry identical values.
    return struct.unpack(f"<{dims}f", struct.pack(f"<{dims}f", *(v / norm for v in raw)))


def fake_vector(text: str, dims: int) -> list[float]:
    """Deterministic unit vector for ``text`` (derived from sha256(text)), float32-exact values.

    Same text -> same vector; different texts -> unrelated vectors (no semantic similarity).
    Matryoshka-like: ``fake_vector(t, d)`` equals the first ``d`` components of
    ``fake_vector(t, D)`` (``D > d``) re-normalised.
    """
    return list(_unit_vector(text, dims))


def text_scale(text: str) -> float:
    """Deterministic per-text factor in [0.5, 1.5], never ~1 (used for non-normalised vectors)."""
    b = hashlib.sha256(b"scale:" + text.encode("utf-8", "surrogatepass")).digest()[0]
    f = 0.5 + b / 255.0
    return 1.25 if abs(f - 1.0) < 0.05 else f


def estimate_tokens(text: str) -> int:
    """Token estimate used by every fake: ceil(len(text) / 4), at least 1 for non-empty text."""
    return math.ceil(len(text) / 4)


def b64_float32(vec: list[float]) -> str:
    """Little-endian float32 base64, as the OpenAI/Voyage APIs return with encoding_format=base64."""
    return base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode("ascii")


def iso_time(ts: float) -> str:
    """RFC 3339 / ISO 8601 UTC timestamp with a trailing Z."""
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def new_id(prefix: str = "", n: int = 24) -> str:
    return prefix + uuid.uuid4().hex[:n]


# --------------------------------------------------------------------------------------------
# Requests, responses, faults
# --------------------------------------------------------------------------------------------


@dataclass
class RecordedRequest:
    """One HTTP request as received (``headers`` keys are lower-case)."""

    seq: int
    time: float
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    raw: bytes
    kind: str = "other"
    inputs: list[str] = field(default_factory=list)
    status: int | None = None  # None: no response sent (closed/reset/hung) or still in flight
    fault: str | None = None  # kind of the injected fault that answered it, if any
    info: dict[str, Any] = field(default_factory=dict)  # provider extras (task_type, dims, ...)

    def header(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name.lower(), default)


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    action: Literal["send", "close", "reset"] = "send"
    drip_s: float = 0.0  # > 0: the body is sent one byte at a time, this many seconds apart
    chunked_forever: bool = False  # a chunked body that never ends (``body`` repeated)


def json_response(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    body = json.dumps(obj, separators=(",", ":")).encode()
    h = {"Content-Type": "application/json"}
    if headers:
        h.update(headers)
    return Response(status, body, h)


BAD_PAYLOAD_KINDS = frozenset({"fewer", "wrong_dims", "nan", "inf", "empty", "zero", "reorder", "dup_index",
                               "gap_index"})
FAULT_KINDS = frozenset({"status", "malformed", "close", "reset", "slow", "hang", "raw", "drip", "endless"}) \
    | BAD_PAYLOAD_KINDS


@dataclass
class Fault:
    """A scripted answer for one request.

    kind:
      status     error response ``status`` in the provider's exact envelope (+Retry-After)
      malformed  HTTP 200, Content-Type JSON, truncated/invalid JSON body
      close      close the connection without any response
      reset      TCP RST without any response
      slow       sleep ``seconds`` then answer normally
      hang       sleep ``seconds`` then close without a response (use > client timeout)
      raw        HTTP 200 with ``body`` and ``headers`` as given (an HTML page, a JSON body of a
                 wrong shape, a gzip bomb with ``Content-Encoding: gzip``)
      drip       the normal answer, its body sent one byte every ``seconds``
      endless    HTTP 200, a chunked body repeating ``body`` for ever
      fewer | wrong_dims | nan | inf | empty | zero | reorder
                 bad payload in an otherwise valid 200 embedding response: one vector fewer than
                 inputs; every vector one component short (or +1 if dims==1); first value NaN;
                 first value +Infinity; first vector empty; first vector all zeros; data items
                 returned in reverse order (OpenAI/Voyage keep correct ``index``; Gemini has none);
                 dup_index: the last item carries the first item's index; gap_index: the last
                 item's index is n (OpenAI/Voyage only: Gemini responses carry no index)
    """

    kind: str
    status: int = 500
    message: str | None = None
    code: str | None = None
    retry_after: float | None = None
    retry_after_ms: int | None = None
    seconds: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; expected one of {sorted(FAULT_KINDS)}")


def apply_bad_payload(kind: str | None, vectors: list[list[float]]) -> list[tuple[int, list[float]]]:
    """Return (index, vector) pairs after applying a bad-payload fault kind (or none)."""
    out = [(i, list(v)) for i, v in enumerate(vectors)]
    if not kind or not out:
        return out
    if kind == "fewer":
        out = out[:-1]
    elif kind == "reorder":
        out = list(reversed(out))
    elif kind == "wrong_dims":
        out = [(i, v[:-1] if len(v) > 1 else v + [0.0]) for i, v in out]
    elif kind == "nan":
        out[0][1][0:1] = [math.nan]
    elif kind == "inf":
        out[0][1][0:1] = [math.inf]
    elif kind == "empty":
        out[0] = (out[0][0], [])
    elif kind == "zero":
        out[0] = (out[0][0], [0.0] * len(out[0][1]))
    elif kind == "dup_index":  # the last item claims the first index (one input: index 1)
        out[-1] = (out[0][0] if len(out) > 1 else 1, out[-1][1])
    elif kind == "gap_index":  # the last item's index is n: n-1 is missing
        out[-1] = (len(out), out[-1][1])
    return out


@dataclass
class Route:
    method: str
    pattern: str
    kind: str
    handler: Callable[[RecordedRequest, re.Match[str], Fault | None], Response]
    regex: re.Pattern[str] = field(init=False)

    def __post_init__(self) -> None:
        self.regex = re.compile(self.pattern)


# --------------------------------------------------------------------------------------------
# HTTP plumbing
# --------------------------------------------------------------------------------------------


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 128
    fake: FakeServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def setup(self) -> None:
        super().setup()
        self.server.fake._track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.fake._track(self.connection, False)

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                size_line = self.rfile.readline()
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def _serve(self) -> None:
        try:
            raw = self._read_body()
        except (OSError, ValueError):
            self.close_connection = True
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            resp = self.server.fake._handle(self.command, self.path, headers, raw)
        except Exception:  # a bug in the fake: answer 500 rather than hang the client
            traceback.print_exc()
            resp = Response(500, b'{"error":"fake server crashed"}', {"Content-Type": "application/json"})
        if resp.action == "close":
            self.close_connection = True
            return
        if resp.action == "reset":
            self.close_connection = True
            try:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
            except OSError:
                pass
            return
        try:
            self.send_response(resp.status)
            for k, v in resp.headers.items():
                self.send_header(k, v)
            if resp.chunked_forever:
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                piece = f"{len(resp.body):x}\r\n".encode() + resp.body + b"\r\n"
                while not self.server.fake._stop_event.is_set():
                    self.wfile.write(piece)
                return
            self.send_header("Content-Length", str(len(resp.body)))
            self.end_headers()
            if self.command != "HEAD":
                if resp.drip_s > 0:
                    for i in range(len(resp.body)):
                        if self.server.fake._stop_event.is_set():
                            break
                        self.wfile.write(resp.body[i:i + 1])
                        self.wfile.flush()
                        time.sleep(resp.drip_s)
                else:
                    self.wfile.write(resp.body)
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _serve


# --------------------------------------------------------------------------------------------
# Base server
# --------------------------------------------------------------------------------------------


class FakeServer:
    """Base fake server: lifecycle, request log, counters, fault injection, billing ledger.

    Subclasses provide ``routes()``, ``error()`` (exact provider error envelope),
    ``embed_inputs()`` and ``check_auth()``.
    """

    provider: ClassVar[str] = "fake"
    base_path: ClassVar[str] = ""
    model_dims: ClassVar[dict[str, int]] = {}
    fallback_dims: ClassVar[int] = 1536

    def __init__(
        self,
        *,
        dims: int | None = None,
        delay: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
        log_file: str | os.PathLike[str] | None = None,
        api_key: str | None = None,
    ) -> None:
        self.dims = dims
        self.delay = delay
        self.delay_kinds: set[str] | None = None  # None: ``delay`` applies to every request
        self.host = host
        self.port = port
        self.log_file = os.fspath(log_file) if log_file is not None else None
        self.log_texts = False  # include every input text in the --log file (O(n) per request)
        self.api_key = api_key
        self.lock = threading.RLock()
        self._log_lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._faults: list[list[Any]] = []  # [on, Fault, remaining (None = forever)]
        self._sync_billed: list[str] = []
        self._stop_event = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._conns: set[socket.socket] = set()
        self._routes = self.routes()

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> FakeServer:
        if self._httpd is not None:
            return self
        self._stop_event.clear()
        httpd = _HTTPServer((self.host, self.port), _Handler)
        httpd.fake = self
        self._httpd = httpd
        self.port = httpd.server_address[1]
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{self.provider}-fake",
            daemon=True,
        )
        self._thread.start()
        self._write_log()
        return self

    def stop(self) -> None:
        httpd = self._httpd
        if httpd is None:
            return
        self._stop_event.set()
        httpd.shutdown()
        httpd.server_close()
        with self.lock:
            conns = list(self._conns)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=2)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._httpd is not None

    @property
    def url(self) -> str:
        """Root URL, ``http://127.0.0.1:<port>``."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The URL to hand to the provider SDK as ``base_url``."""
        return self.url + self.base_path

    def _track(self, conn: socket.socket, add: bool) -> None:
        with self.lock:
            if add:
                self._conns.add(conn)
            else:
                self._conns.discard(conn)

    def sleep(self, seconds: float) -> bool:
        """Interruptible sleep (returns early, True, when the server stops)."""
        return self._stop_event.wait(seconds) if seconds > 0 else False

    # ---- hooks for subclasses --------------------------------------------------------------

    def routes(self) -> list[Route]:
        return []

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
        return json_response({"error": message or f"HTTP {status}"}, status, h)

    def malformed_body(self) -> bytes:
        return b'{"data": [{"embedding": [0.1, 0.2'

    def embed_inputs(self, rec: RecordedRequest) -> list[str]:
        """Best-effort list of input texts of a sync embedding request (for the log)."""
        return []

    def check_auth(self, rec: RecordedRequest) -> Response | None:
        return None

    def not_found(self, rec: RecordedRequest) -> Response:
        return self.error(404, f"Invalid URL ({rec.method} {rec.path})")

    def default_dims(self, model: str | None) -> int:
        if self.dims is not None:
            return self.dims
        return self.model_dims.get(model or "", self.fallback_dims)

    def native_dims(self, model: str | None) -> int:
        return self.model_dims.get(model or "", self.fallback_dims)

    # True: one vector for every text (sync and Batch API answers alike), as a misconfigured
    # gateway or caching proxy answers; False again: the provider is fixed
    same_vector: bool = False
    SAME_VECTOR_TEXT: ClassVar[str] = "one answer for every text"

    def vector_text(self, text: str) -> str:
        """The text whose vector answers ``text`` (see ``same_vector``)."""
        return self.SAME_VECTOR_TEXT if self.same_vector else text

    def vector_for(self, text: str, dims: int, model: str | None = None) -> list[float]:
        return fake_vector(self.vector_text(text), dims)

    # ---- dispatch --------------------------------------------------------------------------

    def _handle(self, method: str, target: str, headers: dict[str, str], raw: bytes) -> Response:
        parts = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                body = None
        rec = RecordedRequest(0, time.time(), method.upper(), parts.path, query, headers, body, raw)
        route, match = self._match(rec.method, rec.path)
        rec.kind = route.kind if route else "other"
        if rec.kind == "embed":
            try:
                rec.inputs = self.embed_inputs(rec)
            except Exception:
                rec.inputs = []
        with self.lock:
            rec.seq = len(self._requests) + 1
            self._requests.append(rec)
        self._write_log()
        try:
            resp = self._answer(rec, route, match)
        finally:
            self._write_log()
        rec.status = resp.status if resp.action == "send" else None
        return resp

    def _match(self, method: str, path: str) -> tuple[Route | None, re.Match[str] | None]:
        for r in self._routes:
            if r.method == method:
                m = r.regex.fullmatch(path)
                if m:
                    return r, m
        return None, None

    def _answer(self, rec: RecordedRequest, route: Route | None, match: re.Match[str] | None) -> Response:
        if route is None or match is None:
            return self.not_found(rec)
        auth = self.check_auth(rec)
        if auth is not None:
            return auth
        fault = self._pop_fault(rec.kind)
        if self.delay > 0 and (self.delay_kinds is None or rec.kind in self.delay_kinds):
            self.sleep(self.delay)
        if fault is not None:
            rec.fault = fault.kind
            if fault.kind == "status":
                return self.error(
                    fault.status,
                    fault.message,
                    code=fault.code,
                    retry_after=fault.retry_after,
                    retry_after_ms=fault.retry_after_ms,
                    headers=fault.headers,
                )
            if fault.kind == "malformed":
                return Response(200, self.malformed_body(), {"Content-Type": "application/json"})
            if fault.kind == "close":
                return Response(action="close")
            if fault.kind == "reset":
                return Response(action="reset")
            if fault.kind == "hang":
                self.sleep(fault.seconds)
                return Response(action="close")
            if fault.kind == "raw":
                return Response(200, fault.body, dict(fault.headers or {"Content-Type": "application/json"}))
            if fault.kind == "endless":
                return Response(200, fault.body or b"x" * 65536, {"Content-Type": "application/json"},
                                chunked_forever=True)
            if fault.kind == "drip":
                resp = route.handler(rec, match, None)
                resp.drip_s = fault.seconds
                return resp
            if fault.kind == "slow":
                self.sleep(fault.seconds)
                fault = None
        return route.handler(rec, match, fault)

    # ---- fault injection -------------------------------------------------------------------

    def inject(self, fault: Fault, n: int | None = 1, *, on: str = "embed") -> None:
        """Queue ``fault`` for the next ``n`` requests of kind ``on`` ("*" = any kind).

        ``n=None`` keeps it active until ``clear_faults()``. Queued faults are used in FIFO order.
        """
        if n is not None and n <= 0:
            return
        with self.lock:
            self._faults.append([on, fault, n])

    def fail_next(
        self,
        n: int | None = 1,
        status: int = 429,
        *,
        retry_after: float | None = None,
        retry_after_ms: int | None = None,
        message: str | None = None,
        code: str | None = None,
        on: str = "embed",
    ) -> None:
        """Answer the next ``n`` requests with an error ``status`` in the provider's envelope."""
        self.inject(
            Fault(
                "status",
                status=status,
                retry_after=retry_after,
                retry_after_ms=retry_after_ms,
                message=message,
                code=code,
            ),
            n,
            on=on,
        )

    def malformed_next(self, n: int | None = 1, *, on: str = "embed") -> None:
        self.inject(Fault("malformed"), n, on=on)

    def close_next(self, n: int | None = 1, *, on: str = "embed") -> None:
        self.inject(Fault("close"), n, on=on)

    def reset_next(self, n: int | None = 1, *, on: str = "embed") -> None:
        self.inject(Fault("reset"), n, on=on)

    def slow_next(self, n: int | None = 1, seconds: float = 1.0, *, on: str = "embed") -> None:
        self.inject(Fault("slow", seconds=seconds), n, on=on)

    def hang_next(self, n: int | None = 1, seconds: float = 30.0, *, on: str = "embed") -> None:
        self.inject(Fault("hang", seconds=seconds), n, on=on)

    def bad_payload_next(self, mode: str, n: int | None = 1) -> None:
        if mode not in BAD_PAYLOAD_KINDS:
            raise ValueError(f"bad payload mode must be one of {sorted(BAD_PAYLOAD_KINDS)}")
        self.inject(Fault(mode), n, on="embed")

    def clear_faults(self) -> None:
        with self.lock:
            self._faults.clear()

    @property
    def pending_faults(self) -> list[tuple[str, Fault, int | None]]:
        with self.lock:
            return [(on, f, n) for on, f, n in self._faults]

    def _pop_fault(self, kind: str) -> Fault | None:
        with self.lock:
            for entry in self._faults:
                on, fault, remaining = entry
                if on == "*" or on == kind:
                    if remaining is not None:
                        entry[2] = remaining - 1
                        if entry[2] <= 0:
                            self._faults.remove(entry)
                    return fault
        return None

    # ---- request log and counters ----------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        with self.lock:
            return list(self._requests)

    def requests_of(self, kind: str) -> list[RecordedRequest]:
        with self.lock:
            return [r for r in self._requests if r.kind == kind]

    @property
    def embed_requests(self) -> int:
        """Sync embedding HTTP requests received (any outcome, faults included)."""
        return len(self.requests_of("embed"))

    def wait_for_embed_requests(self, n: int, proc: Any = None, timeout: float = 60) -> None:
        """Wait until ``n`` sync embedding requests have come (a test's client process, ``proc``, is
        then waiting on them); fail if ``proc`` ended first or they did not come within ``timeout``."""
        deadline = time.monotonic() + timeout
        while self.embed_requests < n and time.monotonic() < deadline:
            if proc is not None:
                assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        assert self.embed_requests == n, (self.embed_requests, n)

    @property
    def embedded_inputs(self) -> int:
        """Total inputs across all sync embedding requests received (any outcome)."""
        with self.lock:
            return sum(len(r.inputs) for r in self._requests if r.kind == "embed")

    @property
    def input_texts(self) -> list[str]:
        """Every input text received by sync embedding requests, in arrival order."""
        with self.lock:
            return [t for r in self._requests if r.kind == "embed" for t in r.inputs]

    @property
    def sync_billed_texts(self) -> list[str]:
        """Texts of sync requests answered with HTTP 200 (i.e. the provider would bill them)."""
        with self.lock:
            return list(self._sync_billed)

    @property
    def batch_billed_texts(self) -> list[str]:
        return []

    @property
    def billed_texts(self) -> list[str]:
        """All billed texts, sync + batch, with repetitions."""
        return self.sync_billed_texts + self.batch_billed_texts

    @property
    def unique_billed_texts(self) -> set[str]:
        return set(self.billed_texts)

    def paid_twice(self) -> dict[str, int]:
        """Texts billed more than once (sync and/or batch) -> number of times billed."""
        return {t: n for t, n in Counter(self.billed_texts).items() if n > 1}

    def _bill_sync(self, texts: Iterable[str]) -> None:
        with self.lock:
            self._sync_billed.extend(texts)

    def reset_log(self) -> None:
        """Forget recorded requests and billing (not files/jobs/faults)."""
        with self.lock:
            self._requests.clear()
            self._sync_billed.clear()

    def counts(self, include_texts: bool = True) -> dict[str, Any]:
        """Snapshot of the counters (this is what ``--log FILE`` writes; texts only if ``log_texts``)."""
        with self.lock:
            reqs = list(self._requests)
        embed = [r for r in reqs if r.kind == "embed"]
        texts = [t for r in embed for t in r.inputs]
        return {
            "provider": self.provider,
            "pid": os.getpid(),
            "base_url": self.base_url,
            "requests": len(reqs),
            "embed_requests": len(embed),
            "embedded_inputs": sum(len(r.inputs) for r in embed),
            "embed_ok_requests": sum(1 for r in embed if r.status == 200),
            "unique_input_texts": len(set(texts)),
            **({"input_texts": texts} if include_texts else {}),
            "sync_billed_inputs": len(self.sync_billed_texts),
            "batch_billed_inputs": len(self.batch_billed_texts),
            "unique_billed_inputs": len(self.unique_billed_texts),
            "paid_twice": len(self.paid_twice()),
            "kinds": dict(Counter(r.kind for r in reqs)),
        }

    def _write_log(self) -> None:
        if not self.log_file:
            return
        with self._log_lock:
            data = json.dumps(self.counts(include_texts=self.log_texts))
            tmp = f"{self.log_file}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(data)
            os.replace(tmp, self.log_file)


def add_retry_headers(h: dict[str, str], retry_after: float | None, retry_after_ms: int | None) -> None:
    if retry_after is not None:
        h["Retry-After"] = str(int(retry_after)) if float(retry_after).is_integer() else str(retry_after)
    if retry_after_ms is not None:
        h["retry-after-ms"] = str(retry_after_ms)


# --------------------------------------------------------------------------------------------
# Files and the batch engine
# --------------------------------------------------------------------------------------------


@dataclass
class StoredFile:
    id: str
    data: bytes
    filename: str
    purpose: str
    created_at: float
    mime_type: str = "application/jsonl"
    display_name: str | None = None
    source: str = "UPLOADED"
    complete: bool = True  # False while a resumable upload is in progress
    expected_size: int | None = None


@dataclass
class BatchItem:
    """One request line of a batch input (custom_id / key and its texts)."""

    custom_id: str
    texts: list[str]
    model: str
    dims: int
    line: int
    encoding: str = "float"
    extra: dict[str, Any] = field(default_factory=dict)
    error: tuple[int, str, str | None] | None = None  # per-line request error: (status, message, code)


@dataclass
class JobFault:
    """Scripted behaviour of one batch job.

    outcome: what happens when the job's time is up -- ``complete``; ``fail`` (status failed,
      ``errors.data=[{code,line,message,param}]``, no output); ``expire`` (first
      ``completed_before_end`` items succeed, the rest get batch_expired error lines);
      ``cancel`` (server-side cancellation, same partial rule); ``hang`` (never finishes on its
      own: stays in_progress until ``complete_job``/``fail_job``/... is called).
    delay: seconds from creation to the outcome (None -> server.batch_delay).
    Output faults (applied to distinct items in input order, in this order; the rest succeed):
      error_lines (line with ``error:{code,message}``, response null), http_error_lines
      (``response.status_code`` = http_error_status with an error body), malformed_lines
      (unparseable JSON), bad_vector_lines (``bad_vector`` mode: empty_data | empty | wrong_dims |
      nan | zero | dup_index (two items, both index 0) | gap_index (one item, index 1)), missing_lines (never returned). Then: duplicate_lines (first N successful
      lines written twice), conflicting_lines (the next N successful lines written again with
      another vector), unknown_lines (N extra lines with custom ids never submitted),
      raw_output_lines (lines appended to the output file as they are, e.g. hostile JSON).
    per_id: explicit ``{custom_id: kind}`` with kind in error | http_error | malformed |
      bad_vector | missing (applied before the counts).
    errors_in_output: write error/http_error lines to the output file instead of the error file
      (OpenAI-style only; Gemini always writes them inline).
    shuffle: shuffle output order (None -> server.shuffle_output, default True).
    """

    outcome: Literal["complete", "fail", "expire", "cancel", "hang"] = "complete"
    delay: float | None = None
    fail_code: str = "batch_failed"
    fail_message: str = "The batch failed (injected by the fake)."
    completed_before_end: int = 0
    error_lines: int = 0
    error_code: str = "server_error"
    error_message: str = "The request could not be processed (injected by the fake)."
    http_error_lines: int = 0
    http_error_status: int = 500
    malformed_lines: int = 0
    bad_vector_lines: int = 0
    bad_vector: str = "empty_data"
    missing_lines: int = 0
    duplicate_lines: int = 0
    unknown_lines: int = 0
    conflicting_lines: int = 0
    raw_output_lines: list[str] = field(default_factory=list)
    per_id: dict[str, str] = field(default_factory=dict)
    errors_in_output: bool = False
    shuffle: bool | None = None


@dataclass
class ItemOutcome:
    kind: str  # ok | error | http_error | malformed | bad_vector | expired | cancelled | duplicate | unknown
    item: BatchItem
    status: int = 200
    code: str | None = None
    message: str | None = None


TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})


@dataclass
class BatchJob:
    """Canonical (OpenAI-named) job state; each fake renders it in its own format."""

    id: str
    created_at: float
    items: list[BatchItem]
    fault: JobFault
    model: str | None = None
    input_file_id: str | None = None
    endpoint: str = "/v1/embeddings"
    completion_window: str = "24h"
    metadata: dict[str, Any] | None = None
    request: dict[str, Any] = field(default_factory=dict)
    display_name: str | None = None
    inline: bool = False
    status: str = "validating"
    validation_errors: list[dict[str, Any]] = field(default_factory=list)
    times: dict[str, float] = field(default_factory=dict)  # in_progress_at, completed_at, ...
    output_file_id: str | None = None
    error_file_id: str | None = None
    outcomes: list[ItemOutcome] = field(default_factory=list)
    inline_responses: list[dict[str, Any]] = field(default_factory=list)
    completed_count: int = 0
    failed_count: int = 0
    polls: int = 0
    cancel_requested: bool = False

    @property
    def custom_ids(self) -> list[str]:
        return [i.custom_id for i in self.items]

    @property
    def texts(self) -> list[str]:
        return [t for i in self.items for t in i.texts]

    @property
    def done(self) -> bool:
        return self.status in TERMINAL


class BatchingFakeServer(FakeServer):
    """FakeServer plus a file store and the batch-job engine shared by all three fakes.

    Timing: ``batch_delay`` seconds after creation a job reaches its scripted outcome (default 0:
    the create response says ``validating``, the first poll already sees the final state). The
    first 20 % of the delay is validating, then in_progress, the last 20 % finalizing (if the
    provider has it). ``batch_delay=None``: jobs stop at in_progress until ``complete_job()``.
    """

    has_finalizing: ClassVar[bool] = True
    has_cancelling: ClassVar[bool] = True
    reject_duplicate_ids: ClassVar[bool] = True

    def __init__(self, *, batch_delay: float | None = 0.0, **kw: Any) -> None:
        super().__init__(**kw)
        self.batch_delay = batch_delay
        self.cancel_delay = 0.0
        self.shuffle_output = True
        self.default_job_fault = JobFault()
        self.files: dict[str, StoredFile] = {}
        self.jobs: dict[str, BatchJob] = {}
        self._job_faults: list[JobFault] = []
        self._batch_billed: list[str] = []

    # ---- scripting -------------------------------------------------------------------------

    def script_next_job(self, *faults: JobFault) -> None:
        """Queue per-job behaviour for the next created jobs, in order."""
        with self.lock:
            self._job_faults.extend(faults)

    def fail_next_job(self, message: str | None = None, code: str | None = None, **kw: Any) -> None:
        jf = JobFault(outcome="fail", **kw)
        if message is not None:
            jf.fail_message = message
        if code is not None:
            jf.fail_code = code
        self.script_next_job(jf)

    def expire_next_job(self, completed: int = 0, **kw: Any) -> None:
        self.script_next_job(JobFault(outcome="expire", completed_before_end=completed, **kw))

    def cancel_next_job(self, completed: int = 0, **kw: Any) -> None:
        self.script_next_job(JobFault(outcome="cancel", completed_before_end=completed, **kw))

    def hang_next_job(self, **kw: Any) -> None:
        self.script_next_job(JobFault(outcome="hang", **kw))

    def _next_job_fault(self) -> JobFault:
        with self.lock:
            if self._job_faults:
                return self._job_faults.pop(0)
            return copy.deepcopy(self.default_job_fault)

    # ---- manual control --------------------------------------------------------------------

    def job(self, job_id: str) -> BatchJob:
        with self.lock:
            return self.jobs[self._job_key(job_id)]

    @property
    def last_job(self) -> BatchJob | None:
        with self.lock:
            return list(self.jobs.values())[-1] if self.jobs else None

    def _job_key(self, job_id: str) -> str:
        return job_id

    def _targets(self, job_id: str | None) -> list[BatchJob]:
        with self.lock:
            if job_id is None:
                return [j for j in self.jobs.values() if not j.done]
            return [self.jobs[self._job_key(job_id)]]

    def complete_job(self, job_id: str | None = None) -> None:
        """Finish job(s) successfully now (output faults of the job still apply).

        ``job_id=None``: every unfinished job.
        """
        with self.lock:
            for j in self._targets(job_id):
                self._require_open(j)
                self._finish(j, "completed")

    def fail_job(
        self, job_id: str | None = None, message: str | None = None, code: str | None = None
    ) -> None:
        with self.lock:
            for j in self._targets(job_id):
                self._require_open(j)
                if message is not None:
                    j.fault.fail_message = message
                if code is not None:
                    j.fault.fail_code = code
                self._finish(j, "failed")

    def expire_job(self, job_id: str | None = None, completed: int | None = None) -> None:
        with self.lock:
            for j in self._targets(job_id):
                self._require_open(j)
                if completed is not None:
                    j.fault.completed_before_end = completed
                self._finish(j, "expired")

    def cancel_job(self, job_id: str | None = None, completed: int | None = None) -> None:
        """Server-side cancellation (as if cancelled from the provider's dashboard)."""
        with self.lock:
            for j in self._targets(job_id):
                self._require_open(j)
                if completed is not None:
                    j.fault.completed_before_end = completed
                self._finish(j, "cancelled")

    def job_status(self, job_id: str) -> str:
        """Canonical status after advancing the clock (OpenAI names)."""
        with self.lock:
            j = self.job(job_id)
            self._advance(j)
            return j.status

    @staticmethod
    def _require_open(job: BatchJob) -> None:
        if job.done:
            raise ValueError(f"job {job.id} is already {job.status}")

    # ---- counters --------------------------------------------------------------------------

    @property
    def batch_jobs(self) -> list[BatchJob]:
        with self.lock:
            return list(self.jobs.values())

    @property
    def batch_creates(self) -> int:
        return len(self.requests_of("batch_create"))

    @property
    def batch_polls(self) -> int:
        return len(self.requests_of("batch_get"))

    @property
    def batch_submitted_ids(self) -> list[str]:
        """custom_ids (Gemini: keys) of every created job, in order, with repetitions."""
        with self.lock:
            return [cid for j in self.jobs.values() for cid in j.custom_ids]

    @property
    def batch_submitted_texts(self) -> list[str]:
        with self.lock:
            return [t for j in self.jobs.values() for t in j.texts]

    @property
    def batch_billed_texts(self) -> list[str]:
        """Texts of batch items the provider produced an embedding for (once per item)."""
        with self.lock:
            return list(self._batch_billed)

    def counts(self, include_texts: bool = True) -> dict[str, Any]:
        c = super().counts(include_texts)
        with self.lock:
            c.update(
                {
                    "batch_jobs": len(self.jobs),
                    "batch_statuses": {j.id: j.status for j in self.jobs.values()},
                    "batch_submitted_inputs": sum(len(j.texts) for j in self.jobs.values()),
                    "files": len(self.files),
                }
            )
        return c

    def reset_log(self) -> None:
        super().reset_log()
        with self.lock:
            self._batch_billed.clear()

    # ---- files -----------------------------------------------------------------------------

    def add_file(
        self, data: bytes, filename: str, purpose: str, *, prefix: str = "file-", **kw: Any
    ) -> StoredFile:
        f = StoredFile(
            id=new_id(prefix), data=data, filename=filename, purpose=purpose, created_at=time.time(), **kw
        )
        with self.lock:
            self.files[f.id] = f
        return f

    def file_text(self, file_id: str) -> str:
        with self.lock:
            return self.files[file_id].data.decode()

    def file_lines(self, file_id: str) -> list[str]:
        return [ln for ln in self.file_text(file_id).splitlines() if ln.strip()]

    # ---- engine ----------------------------------------------------------------------------

    def register_job(self, job: BatchJob) -> BatchJob:
        with self.lock:
            self.jobs[job.id] = job
        return job

    def _advance(self, job: BatchJob, now: float | None = None) -> None:
        """Move ``job`` along its timeline (called under the lock on every access)."""
        if job.done:
            return
        now = time.time() if now is None else now
        if job.status == "cancelling":
            if now > job.times.get("cancelling_at", now) + self.cancel_delay:
                self._finish(job, "cancelled")
            return
        if job.validation_errors:
            self._set_status(job, "failed", now)
            return
        outcome = job.fault.outcome
        delay = job.fault.delay if job.fault.delay is not None else self.batch_delay
        if delay is None or outcome == "hang":
            if job.status == "validating":
                self._set_status(job, "in_progress", now)
            return
        elapsed = now - job.created_at
        if elapsed >= delay:
            target = {"complete": "completed", "fail": "failed", "expire": "expired", "cancel": "cancelled"}[
                outcome
            ]
            if job.status == "validating" and target in ("completed", "expired", "cancelled"):
                job.times.setdefault("in_progress_at", now)
            if target == "completed" and self.has_finalizing:
                job.times.setdefault("finalizing_at", now)
            self._finish(job, target, now)
        elif self.has_finalizing and elapsed >= 0.8 * delay and outcome == "complete":
            job.times.setdefault("in_progress_at", now)
            self._set_status(job, "finalizing", now)
        elif elapsed >= 0.2 * delay and job.status == "validating":
            self._set_status(job, "in_progress", now)

    def _set_status(self, job: BatchJob, status: str, now: float | None = None) -> None:
        now = time.time() if now is None else now
        job.status = status
        job.times.setdefault(f"{status}_at", now)

    def request_cancel(self, job: BatchJob) -> None:
        """Client-requested cancel: ``cancelling`` (if the provider has it) for ``cancel_delay``
        seconds (the next poll at the earliest), then ``cancelled``; no partial output."""
        job.cancel_requested = True
        if self.has_cancelling:
            self._set_status(job, "cancelling")
        else:
            self._finish(job, "cancelled")

    def _finish(self, job: BatchJob, status: str, now: float | None = None) -> None:
        now = time.time() if now is None else now
        if status == "failed":
            if not job.validation_errors:
                job.validation_errors = [
                    {
                        "code": job.fault.fail_code,
                        "line": None,
                        "message": job.fault.fail_message,
                        "param": None,
                    }
                ]
            self._set_status(job, "failed", now)
            return
        keep = 0 if status == "cancelled" and job.cancel_requested else job.fault.completed_before_end
        outcomes = self._plan_outcomes(job, status, keep)
        job.outcomes = outcomes
        billed = [o.item for o in outcomes if o.kind in ("ok", "malformed", "bad_vector")]
        seen: set[int] = set()
        for item in billed:
            if id(item) not in seen:
                seen.add(id(item))
                self._batch_billed.extend(item.texts)
        ok_ids = {id(o.item) for o in outcomes if o.kind in ("ok", "malformed", "bad_vector")}
        failed_ids = {
            id(o.item) for o in outcomes if o.kind in ("error", "http_error", "expired", "cancelled")
        }
        job.completed_count = (
            len([i for i in job.items if id(i) not in failed_ids]) if status == "completed" else len(ok_ids)
        )
        job.failed_count = len(failed_ids)
        self._set_status(job, status, now)
        self.render_outputs(job, outcomes)

    def _plan_outcomes(self, job: BatchJob, status: str, keep: int) -> list[ItemOutcome]:
        f = job.fault
        outs: list[ItemOutcome] = []
        pool: list[BatchItem] = []
        forced: dict[str, str] = dict(f.per_id)
        for item in job.items:
            if item.error is not None:
                st, msg, code = item.error
                outs.append(ItemOutcome("http_error", item, status=st, code=code, message=msg))
            else:
                pool.append(item)
        if status in ("expired", "cancelled"):
            code = "batch_expired" if status == "expired" else "batch_cancelled"
            msg = (
                "This request could not be executed before the completion window expired."
                if status == "expired"
                else "This request was cancelled before it could be executed."
            )
            outs.extend(ItemOutcome("ok", it) for it in pool[:keep])
            outs.extend(ItemOutcome(status, it, code=code, message=msg) for it in pool[keep:])
            return self._order(job, outs)

        rest: list[BatchItem] = []
        for item in pool:
            kind = forced.get(item.custom_id)
            if kind is None:
                rest.append(item)
            else:
                outs.extend(self._fault_outcome(kind, item, f))
        for count, kind in (
            (f.error_lines, "error"),
            (f.http_error_lines, "http_error"),
            (f.malformed_lines, "malformed"),
            (f.bad_vector_lines, "bad_vector"),
            (f.missing_lines, "missing"),
        ):
            chosen, rest = rest[:count], rest[count:]
            for item in chosen:
                outs.extend(self._fault_outcome(kind, item, f))
        ok = [ItemOutcome("ok", it) for it in rest]
        outs.extend(ok)
        outs.extend(ItemOutcome("duplicate", o.item) for o in ok[: f.duplicate_lines])
        outs.extend(ItemOutcome("conflict", o.item)
                    for o in ok[f.duplicate_lines: f.duplicate_lines + f.conflicting_lines])
        for n in range(f.unknown_lines):
            text = f"unknown text {n} of {job.id}"
            sample = job.items[0] if job.items else None
            fake = BatchItem(
                custom_id=f"unknown-{n}-{job.id[-8:]}",
                texts=[text],
                model=sample.model if sample else (job.model or ""),
                dims=sample.dims if sample else self.default_dims(job.model),
                line=0,
                encoding=sample.encoding if sample else "float",
            )
            outs.append(ItemOutcome("unknown", fake))
        return self._order(job, outs)

    @staticmethod
    def _fault_outcome(kind: str, item: BatchItem, f: JobFault) -> list[ItemOutcome]:
        if kind == "missing":
            return []
        if kind == "error":
            return [ItemOutcome("error", item, code=f.error_code, message=f.error_message)]
        if kind == "http_error":
            return [ItemOutcome("http_error", item, status=f.http_error_status, message=f.error_message)]
        if kind in ("malformed", "bad_vector"):
            return [ItemOutcome(kind, item)]
        raise ValueError(f"unknown per_id outcome {kind!r}")

    def _order(self, job: BatchJob, outs: list[ItemOutcome]) -> list[ItemOutcome]:
        shuffle = job.fault.shuffle if job.fault.shuffle is not None else self.shuffle_output
        if shuffle and not job.inline:
            random.Random(job.id).shuffle(outs)
        return outs

    def bad_vector(self, mode: str, vec: list[float]) -> list[float] | None:
        """Vector for a ``bad_vector`` line; None means "no data at all" (empty_data)."""
        if mode == "empty_data":
            return None
        if mode == "empty":
            return []
        if mode == "wrong_dims":
            return vec[:-1] if len(vec) > 1 else vec + [0.0]
        if mode == "nan":
            return [math.nan] + vec[1:]
        if mode == "zero":
            return [0.0] * len(vec)
        raise ValueError(f"unknown bad_vector mode {mode!r}")

    def render_outputs(self, job: BatchJob, outcomes: list[ItemOutcome]) -> None:
        """Provider hook: write output/error files (or inline responses) for ``outcomes``."""
        raise NotImplementedError


def truncated_line(obj: dict[str, Any]) -> str:
    """A deliberately unparseable JSONL line that starts like ``obj``."""
    s = json.dumps(obj, separators=(",", ":"))
    return s[: max(10, len(s) // 2)]


# --------------------------------------------------------------------------------------------
# Multipart
# --------------------------------------------------------------------------------------------


@dataclass
class FormPart:
    name: str
    data: bytes
    filename: str | None = None
    content_type: str | None = None


def parse_multipart(raw: bytes, content_type: str) -> dict[str, FormPart]:
    m = re.search(r'boundary="?([^";]+)"?', content_type or "")
    if not m:
        raise ValueError("no multipart boundary")
    delim = b"--" + m.group(1).encode()
    out: dict[str, FormPart] = {}
    for chunk in raw.split(delim)[1:]:
        if chunk.startswith(b"--"):
            break
        if chunk.startswith(b"\r\n"):
            chunk = chunk[2:]
        head, _, data = chunk.partition(b"\r\n\r\n")
        if data.endswith(b"\r\n"):
            data = data[:-2]
        headers: dict[str, str] = {}
        for line in head.decode("utf-8", "replace").split("\r\n"):
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        disp = headers.get("content-disposition", "")
        nm = re.search(r'(?:^|;)\s*name="([^"]*)"', disp)
        fn = re.search(r'filename="([^"]*)"', disp)
        if nm:
            out[nm.group(1)] = FormPart(
                nm.group(1), data, fn.group(1) if fn else None, headers.get("content-type")
            )
    return out


# --------------------------------------------------------------------------------------------
# OpenAI-compatible files + batches + embeddings (shared by the OpenAI and Voyage fakes)
# --------------------------------------------------------------------------------------------


@dataclass
class EmbedCall:
    texts: list[str]
    model: str
    dims: int
    encoding: str = "float"
    tokens: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class OpenAICompatibleFake(BatchingFakeServer):
    """Files + Batches + /embeddings with OpenAI's shapes; subclasses fix the provider details."""

    base_path = "/v1"
    completion_windows: ClassVar[tuple[str, ...]] = ("24h",)
    batch_endpoints: ClassVar[tuple[str, ...]] = ("/v1/embeddings",)
    expires_after: ClassVar[float] = 24 * 3600.0
    iso_times: ClassVar[bool] = False
    line_has_ids: ClassVar[bool] = True
    max_batch_requests: ClassVar[int] = 50_000
    max_batch_inputs: ClassVar[int] = 50_000

    # ---- provider hooks --------------------------------------------------------------------

    def parse_embed(self, body: Any, *, for_batch: dict[str, Any] | None = None) -> EmbedCall | Response:
        raise NotImplementedError

    def render_embed(self, call: EmbedCall, pairs: list[tuple[int, list[float]]]) -> dict[str, Any]:
        data: list[dict[str, Any]] = []
        for i, v in pairs:
            emb: Any = b64_float32(v) if call.encoding == "base64" else v
            data.append({"object": "embedding", "index": i, "embedding": emb})
        return {"object": "list", "data": data, "model": call.model, "usage": self.usage(call)}

    def usage(self, call: EmbedCall) -> dict[str, int]:
        return {"prompt_tokens": call.tokens, "total_tokens": call.tokens}

    def validate_batch_create(self, body: dict[str, Any]) -> Response | None:
        return None

    def parse_batch_line(self, obj: Any, line_no: int, create: dict[str, Any]) -> BatchItem | dict[str, Any]:
        raise NotImplementedError

    def extra_batch_fields(self, job: BatchJob) -> dict[str, Any]:
        return {}

    # ---- routes ----------------------------------------------------------------------------

    def routes(self) -> list[Route]:
        p = re.escape(self.base_path)
        fid = r"(?P<id>[^/]+)"
        return [
            Route("POST", rf"{p}/embeddings", "embed", self._h_embed),
            Route("POST", rf"{p}/files", "file_upload", self._h_file_upload),
            Route("GET", rf"{p}/files", "file_list", self._h_file_list),
            Route("GET", rf"{p}/files/{fid}", "file_get", self._h_file_get),
            Route("DELETE", rf"{p}/files/{fid}", "file_delete", self._h_file_delete),
            Route("GET", rf"{p}/files/{fid}/content", "file_content", self._h_file_content),
            Route("POST", rf"{p}/batches", "batch_create", self._h_batch_create),
            Route("GET", rf"{p}/batches", "batch_list", self._h_batch_list),
            Route("GET", rf"{p}/batches/{fid}", "batch_get", self._h_batch_get),
            Route("POST", rf"{p}/batches/{fid}/cancel", "batch_cancel", self._h_batch_cancel),
        ]

    def check_auth(self, rec: RecordedRequest) -> Response | None:
        if self.api_key is None:
            return None
        auth = rec.header("authorization") or ""
        if auth != f"Bearer {self.api_key}":
            return self.auth_error(auth.removeprefix("Bearer ").strip())
        return None

    def auth_error(self, key: str) -> Response:
        return self.error(401, "Incorrect API key provided.")

    def ts(self, t: float | None) -> Any:
        if t is None:
            return None
        return iso_time(t) if self.iso_times else int(t)

    def embed_inputs(self, rec: RecordedRequest) -> list[str]:
        body = rec.body if isinstance(rec.body, dict) else {}
        return normalise_input(body.get("input"))[0] or []

    # ---- sync embeddings -------------------------------------------------------------------

    def _h_embed(self, rec: RecordedRequest, m: re.Match[str], fault: Fault | None) -> Response:
        call = self.parse_embed(rec.body)
        if isinstance(call, Response):
            return call
        rec.info.update({"model": call.model, "dims": call.dims, "encoding": call.encoding, **call.extra})
        vectors = [self.vector_for(t, call.dims, call.model) for t in call.texts]
        pairs = apply_bad_payload(fault.kind if fault else None, vectors)
        body = self.render_embed(call, pairs)
        self._bill_sync(call.texts)
        return json_response(body, headers={"x-request-id": new_id("req_")})

    # ---- files -----------------------------------------------------------------------------

    def file_object(self, f: StoredFile) -> dict[str, Any]:
        return {
            "id": f.id,
            "object": "file",
            "bytes": len(f.data),
            "created_at": self.ts(f.created_at),
            "filename": f.filename,
            "purpose": f.purpose,
            "status": "processed",
            "expires_at": None,
            "status_details": None,
        }

    def _h_file_upload(self, rec: RecordedRequest, m: re.Match[str], fault: Fault | None) -> Response:
        ctype = rec.header("content-type") or ""
        if "multipart/form-data" not in ctype:
            return self.error(400, "Expected a multipart/form-data request with fields 'purpose' and 'file'.")
        try:
            form = parse_multipart(rec.raw, ctype)
        except ValueError as exc:
            return self.error(400, f"Could not parse multipart body: {exc}")
        purpose = form["purpose"].data.decode() if "purpose" in form else None
        if "file" not in form:
            return self.error(400, "Missing required parameter: 'file'.", param="file")
        if not purpose:
            return self.error(400, "Missing required parameter: 'purpose'.", param="purpose")
        if purpose not in ("batch", "fine-tune", "assistants", "vision", "user_data", "evals"):
            return self.error(400, f"Invalid value for 'purpose': '{purpose}'.", param="purpose")
        part = form["file"]
        f = self.add_file(part.data, part.filename or "upload.jsonl", purpose)
        return json_response(self.file_object(f))

    def _h_file_list(self, rec: RecordedRequest, m: re.Match[str], fault: Fault | None) -> Response:
        with self.lock:
            files = [self.file_object(f) for f in self.files.values() if f.complete]
        purpose = rec.query.get("purpose")
        if purpose:
            files = [f for f in files if f["purpose"] == purpose]
        return json_response(
            {
                "object": "list",
                "data": files,
                "has_more": False,
                "first_id": files[0]["id"] if files else None,
                "last_id": files[-1]["id"] if files else None,
            }
        )

    def _no_file(self, fid: str) -> Response:
        return self.error(404, f"No such File object: {fid}", param="id")

    def _h_file_get(self, rec: RecordedRequest, m: re.Match[str], fault: Fault | None) -> Response:
        with self.lock:
            f = self.files.get(m["id"])
        return json_response(self.file_object(f)) if f else self._no_file(m["id"])

    def _h_file_delete(self, rec: RecordedRequest, m: re.Match[str], fault: Fault | None) -> Response:
        with self.lock:
            f = self.files.pop(m["id"], None)
        if f is None:
            return self._no_file(m["id"])
        return json_response({"id": f.id, "object": "file", "deleted": True})

    def _h_file_content(self, rec: RecordedRequest, m: re.Match[str], fault: Fault | None) -> Response:
        with self.lock:
            f = self.files.get(m["id"])
        if f is None:
            return self._no_file(m["id"])
        return Response(200, f.data, {"Content-Type": "application/octet-stream"})

    # ---- batches ---------------------------------------------------------------------------

    def batch_object(self, job: BatchJob) -> dict[str, Any]:
        t = job.times
        obj: dict[str, Any] = {
            "id": job.id,
            "object": "batch",
            "endpoint": job.endpoint,
            "errors": {"object": "list", "data": job.validation_errors} if job.validation_errors else None,
            "input_file_id": job.input_file_id,
            "completion_window": job.completion_window,
            "status": job.status,
            "output_file_id": job.output_file_id,
            "error_file_id": job.error_file_id,
            "created_at": self.ts(job.created_at),
            "in_progress_at": self.ts(t.get("in_progress_at")),
            "expires_at": self.ts(job.created_at + self.expires_after),
            "finalizing_at": self.ts(t.get("finalizing_at")),
            "completed_at": self.ts(t.get("completed_at")),
            "failed_at": self.ts(t.get("failed_at")),
            "expired_at": self.ts(t.get("expired_at")),
            "cancelling_at": self.ts(t.get("cancelling_at")),
            "cancelled_at": self.ts(t.get("cancelled_at")),
            "request_counts": {
                "total": len(job.items),
                "completed": job.completed_count,
                "failed": job.failed_count,
            },
            "metadata": job.metadata,
        }
        obj.update(self.extra_batch_fields(job))
        return obj

    def _no_batch(self, bid: str) -> Response:
        return self.error(404, f"No batch found with id '{bid}'.", param="batch_id")

    def _h_batch_create(self, rec: RecordedRequest, m: re.Match[str], fault: Fault | None) -> Response:
        body = rec.body
        if not isinstance(body, dict):
            return self.error(400, "We could not parse the JSON body of your request.")
        for key in ("input_file_id", "endpoint", "completion_window"):
            if not body.get(key):
                return self.error(400, f"Missing required parameter: '{key}'.", param=key)
        if body["endpoint"] not in self.batch_endpoints:
            return self.error(
                400,
                f"Invalid value for 'endpoint': '{body['endpoint']}'. Supported: {', '.join(self.batch_endpoints)}.",
                param="endpoint",
            )
        if body["completion_window"] not in self.completion_windows:
            return self.error(
                400,
                f"Invalid value for 'completion_window': '{body['completion_window']}'. "
                f"Supported values are: {', '.join(repr(w) for w in self.completion_windows)}.",
                param="completion_window",
            )
        problem = self.validate_batch_create(body)
        if problem is not None:
            return problem
        with self.lock:
            f = self.files.get(body["input_file_id"])
        if f is None:
            return self._no_file(body["input_file_id"])
        if f.purpose != "batch":
            return self.error(
                400,
                f"File {f.id} has purpose '{f.purpose}', but batches require purpose 'batch'.",
                param="input_file_id",
            )
        job = BatchJob(
            id=new_id("batch_"),
            created_at=time.time(),
            items=[],
            fault=self._next_job_fault(),
            input_file_id=f.id,
            endpoint=body["endpoint"],
            completion_window=body["completion_window"],
            metadata=body.get("metadata"),
            request=body,
        )
        self._load_items(job, f.data, body)
        if job.items:
            job.model = job.items[0].model
        self.register_job(job)
        return json_response(self.batch_object(job))

    def _load_items(self, job: BatchJob, data: bytes, create: dict[str, Any]) -> None:
        errors = job.validation_errors
        seen: set[str] = set()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            errors.append(
                {
                    "code": "invalid_file_format",
                    "line": None,
                    "message": "The input file is not valid UTF-8.",
                    "param": None,
                }
            )
            return
        lines = text.splitlines()
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                errors.append(
                    {
                        "code": "invalid_json_line",
                        "line": n,
                        "message": "This line is not parseable as valid JSON.",
                        "param": None,
                    }
                )
                continue
            res = self.parse_batch_line(obj, n, create)
            if isinstance(res, dict):
                errors.append(res)
                continue
            if self.reject_duplicate_ids and res.custom_id in seen:
                errors.append(
                    {
                        "code": "duplicate_custom_id",
                        "line": n,
                        "message": "The custom_id for this request is a duplicate of another request. "
                        "The custom_id parameter must be unique for each request in a batch.",
                        "param": "custom_id",
                    }
                )
                continue
            seen.add(res.custom_id)
            job.items.append(res)
        if not job.items and not errors:
            errors.append(
                {"code": "empty_file", "line": None, "message": "The input file is empty.", "param": None}
            )
        if len(job.items) > self.max_batch_requests:
            errors.append(
                {
                    "code": "too_many_requests",
                    "line": None,
                    "message": f"The batch input file contains {len(job.items)} requests; "
                    f"the maximum is {self.max_batch_requests}.",
                    "param": None,
                }
            )
        n_inputs = sum(len(i.texts) for i in job.items)
        if n_inputs > self.max_batch_inputs:
            errors.append(
                {
                    "code": "too_many_embedding_inputs",
                    "line": None,
                    "message": f"The batch contains {n_inputs} embedding inputs; "
                    f"the maximum is {self.max_batch_inputs}.",
                    "param": None,
                }
            )

    def _h_batch_get(self, rec: RecordedRequest, m: re.Match[str], fault: Fault | None) -> Response:
        with self.lock:
            job = self.jobs.get(m["id"])
            if job is None:
                return self._no_batch(m["id"])
            job.polls += 1
            self._advance(job)
            return json_response(self.batch_object(job))

    def _h_batch_list(self, rec: RecordedRequest, m: re.Match[str], fault: Fault | None) -> Response:
        try:
            limit = int(rec.query.get("limit") or 20)
        except ValueError:
            limit = 20
        after = rec.query.get("after")
        with self.lock:
            jobs = list(reversed(self.jobs.values()))  # newest first, like the real API
            for j in jobs:
                self._advance(j)
            if after:
                ids = [j.id for j in jobs]
                jobs = jobs[ids.index(after) + 1 :] if after in ids else []
            page = jobs[:limit]
            data = [self.batch_object(j) for j in page]
        return json_response(
            {
                "object": "list",
                "data": data,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
                "has_more": len(jobs) > limit,
            }
        )

    def _h_batch_cancel(self, rec: RecordedRequest, m: re.Match[str], fault: Fault | None) -> Response:
        with self.lock:
            job = self.jobs.get(m["id"])
            if job is None:
                return self._no_batch(m["id"])
            self._advance(job)
            if job.done or job.status == "cancelling":
                return self.error(409, f"Cannot cancel a batch with status '{job.status}'.")
            self.request_cancel(job)
            return json_response(self.batch_object(job))

    # ---- output rendering ------------------------------------------------------------------

    def http_error_body(self, status: int, message: str, code: str | None) -> dict[str, Any]:
        return json.loads(self.error(status, message, code=code).body)

    def render_outputs(self, job: BatchJob, outcomes: list[ItemOutcome]) -> None:
        out_lines: list[str] = []
        err_lines: list[str] = []
        for o in outcomes:
            line, to_error = self._render_line(job, o)
            (err_lines if to_error and not job.fault.errors_in_output else out_lines).append(line)
        out_lines.extend(job.fault.raw_output_lines)
        if out_lines:
            f = self.add_file(
                ("\n".join(out_lines) + "\n").encode(), f"{job.id}_output.jsonl", "batch_output"
            )
            job.output_file_id = f.id
        if err_lines:
            f = self.add_file(("\n".join(err_lines) + "\n").encode(), f"{job.id}_error.jsonl", "batch_output")
            job.error_file_id = f.id

    def _line(
        self, item: BatchItem, response: dict[str, Any] | None, error: dict[str, Any] | None
    ) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        if self.line_has_ids:
            obj["id"] = new_id("batch_req_")
        obj["custom_id"] = item.custom_id
        obj["response"] = response
        obj["error"] = error
        return obj

    def _response(self, status: int, body: dict[str, Any]) -> dict[str, Any]:
        r: dict[str, Any] = {"status_code": status}
        if self.line_has_ids:
            r["request_id"] = new_id("req_")
        r["body"] = body
        return r

    def _render_line(self, job: BatchJob, o: ItemOutcome) -> tuple[str, bool]:
        item = o.item
        if o.kind in ("ok", "duplicate", "unknown", "malformed", "bad_vector", "conflict"):
            call = EmbedCall(
                item.texts, item.model, item.dims, item.encoding, sum(estimate_tokens(t) for t in item.texts)
            )
            other = "\x00another answer" if o.kind == "conflict" else ""
            pairs = [(i, self.vector_for(t + other, item.dims, item.model)) for i, t in enumerate(item.texts)]
            if o.kind == "bad_vector" and job.fault.bad_vector in ("dup_index", "gap_index"):
                pairs = apply_bad_payload(job.fault.bad_vector, pairs)  # OpenAI/Voyage lines only
                if job.fault.bad_vector == "dup_index" and len(pairs) == 1:
                    pairs = [(0, pairs[0][1]), (0, pairs[0][1])]
            elif o.kind == "bad_vector":
                bad = self.bad_vector(job.fault.bad_vector, pairs[0][1]) if pairs else None
                pairs = [] if bad is None else [(pairs[0][0], bad)] + pairs[1:]
            obj = self._line(item, self._response(200, self.render_embed(call, pairs)), None)
            if o.kind == "malformed":
                return truncated_line(obj), False
            return json.dumps(obj, separators=(",", ":")), False
        if o.kind == "http_error":
            body = self.http_error_body(o.status, o.message or "error", o.code)
            return json.dumps(
                self._line(item, self._response(o.status, body), None), separators=(",", ":")
            ), True
        # error / expired / cancelled: non-HTTP failure
        err = {"code": o.code, "message": o.message}
        return json.dumps(self._line(item, None, err), separators=(",", ":")), True


def normalise_input(inp: Any) -> tuple[list[str] | None, list[int]]:
    """OpenAI-style ``input`` -> (texts, token counts); texts None if the shape is invalid."""
    if isinstance(inp, str):
        return [inp], [estimate_tokens(inp)]
    if isinstance(inp, list) and inp:
        if all(isinstance(x, str) for x in inp):
            return list(inp), [estimate_tokens(x) for x in inp]
        if all(isinstance(x, int) for x in inp):
            return ["tokens:" + ",".join(map(str, inp))], [len(inp)]
        if all(isinstance(x, list) and x and all(isinstance(y, int) for y in x) for x in inp):
            return ["tokens:" + ",".join(map(str, x)) for x in inp], [len(x) for x in inp]
    return None, []


# --------------------------------------------------------------------------------------------
# Command line: python -m tests.fakes.<provider>_fake --port 0 --delay 0.3 --dims 8 --log FILE
# --------------------------------------------------------------------------------------------


def run_cli(server_cls: type[FakeServer], argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=f"Fake {server_cls.provider} embedding server")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--delay", type=float, default=0.0, help="seconds of delay per request")
    ap.add_argument("--dims", type=int, default=None, help="default vector dimension")
    ap.add_argument("--log", default=None, help="JSON file rewritten with the counters after each request")
    ap.add_argument("--log-texts", action="store_true", help="also write all input texts to the log file")
    ap.add_argument("--api-key", default=None, help="require this API key")
    ap.add_argument("--batch-delay", type=float, default=0.0, help="seconds until a batch job completes")
    ap.add_argument("--manual-batches", action="store_true", help="batch jobs never complete on their own")
    ap.add_argument("--fail-next", type=int, default=0, help="fail the next N embedding requests")
    ap.add_argument("--fail-status", type=int, default=429)
    ap.add_argument("--retry-after", type=float, default=None)
    args = ap.parse_args(argv)
    kw: dict[str, Any] = {
        "host": args.host,
        "port": args.port,
        "delay": args.delay,
        "dims": args.dims,
        "log_file": args.log,
        "api_key": args.api_key,
    }
    if issubclass(server_cls, BatchingFakeServer):
        kw["batch_delay"] = None if args.manual_batches else args.batch_delay
    server = server_cls(**kw)
    server.log_texts = args.log_texts
    if args.fail_next:
        server.fail_next(args.fail_next, args.fail_status, retry_after=args.retry_after)
    server.start()
    stop = threading.Event()

    def _stop(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    sys.stdout.write(f"READY {server.base_url}\n")
    sys.stdout.flush()
    while not stop.wait(0.2):
        pass
    server.stop()
    return 0
