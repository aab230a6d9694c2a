"""The fake provider servers work with the REAL official SDKs over HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import voyageai
import voyageai.error
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from tests.fakes.common import JobFault, fake_vector
from tests.fakes.gemini_fake import GeminiFake
from tests.fakes.openai_fake import OpenAIFake
from tests.fakes.voyage_fake import VoyageFake

ROOT = Path(__file__).resolve().parents[1]
DIMS = 8


def close(a: list[float], b: list[float], tol: float = 1e-6) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= tol for x, y in zip(a, b, strict=True))


def unit(v: list[float]) -> list[float]:
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def wait_status(get: Any, done: set[str], timeout: float = 5.0) -> Any:
    deadline = time.time() + timeout
    while True:
        obj = get()
        if obj.status in done:
            return obj
        assert time.time() < deadline, f"still {obj.status}"
        time.sleep(0.02)


# ---------------------------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def oai() -> Iterator[OpenAIFake]:
    with OpenAIFake(dims=DIMS, api_key="sk-test") as srv:
        yield srv


@pytest.fixture
def oai_client(oai: OpenAIFake) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-test", base_url=oai.base_url, max_retries=0, timeout=5)


@pytest.fixture
def voy() -> Iterator[VoyageFake]:
    with VoyageFake(dims=DIMS, api_key="pa-test") as srv:
        yield srv


@pytest.fixture
def vo_client(voy: VoyageFake) -> voyageai.Client:
    return voyageai.Client(api_key="pa-test", base_url=voy.base_url, max_retries=0, timeout=5)


@pytest.fixture
def gem() -> Iterator[GeminiFake]:
    with GeminiFake(dims=DIMS, api_key="g-test") as srv:
        yield srv


def gclient(srv: GeminiFake, version: str = "v1beta", timeout_ms: int = 5000) -> genai.Client:
    return genai.Client(
        api_key="g-test",
        http_options=genai_types.HttpOptions(base_url=srv.base_url, api_version=version, timeout=timeout_ms),
    )


# ---------------------------------------------------------------------------------------------
# common helpers
# ---------------------------------------------------------------------------------------------


def test_fake_vector_is_deterministic_unit_and_distinct() -> None:
    a, b = fake_vector("hello", 16), fake_vector("hello", 16)
    assert a == b
    assert abs(sum(x * x for x in a) - 1.0) < 1e-6
    assert fake_vector("hello!", 16) != a
    # Matryoshka-like prefix property
    assert close(unit(fake_vector("hello", 64)[:16]), a, 1e-5)


# ---------------------------------------------------------------------------------------------
# OpenAI
# ---------------------------------------------------------------------------------------------


def test_openai_sync_base64_default(oai: OpenAIFake, oai_client: openai.OpenAI) -> None:
    resp = oai_client.embeddings.create(model="text-embedding-3-small", input=["alpha", "beta"])
    assert [d.index for d in resp.data] == [0, 1]
    assert close(resp.data[0].embedding, fake_vector("alpha", DIMS))
    assert close(resp.data[1].embedding, fake_vector("beta", DIMS))
    assert resp.usage.prompt_tokens == resp.usage.total_tokens == 3  # ceil(5/4) + ceil(4/4)
    rec = oai.requests_of("embed")[0]
    assert rec.body["encoding_format"] == "base64"
    assert rec.header("authorization") == "Bearer sk-test"
    assert oai.embed_requests == 1 and oai.embedded_inputs == 2
    assert oai.input_texts == ["alpha", "beta"]


def test_openai_sync_float_and_dimensions(oai: OpenAIFake, oai_client: openai.OpenAI) -> None:
    resp = oai_client.embeddings.create(
        model="text-embedding-3-small", input="gamma", encoding_format="float", dimensions=4
    )
    assert resp.data[0].embedding == fake_vector("gamma", 4)
    assert oai.requests_of("embed")[0].body["encoding_format"] == "float"


def test_openai_limits(oai: OpenAIFake, oai_client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="2048"):
        oai_client.embeddings.create(model="text-embedding-3-small", input=["x"] * 2049)
    with pytest.raises(openai.BadRequestError, match="maximum context length is 8192"):
        oai_client.embeddings.create(model="text-embedding-3-small", input=["y" * (8193 * 4)])
    with pytest.raises(openai.BadRequestError) as ei:
        oai_client.embeddings.create(
            model="text-embedding-3-small", input=["z" * 32000] * 10 + ["w" * 32000] * 0 + ["v" * 30000] * 30
        )
    assert ei.value.code == "max_tokens_per_request"
    assert oai.sync_billed_texts == []
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(api_key="sk-wrong", base_url=oai.base_url, max_retries=0).embeddings.create(
            model="text-embedding-3-small", input="a"
        )


def test_openai_faults(oai: OpenAIFake, oai_client: openai.OpenAI) -> None:
    oai.fail_next(1, 429, retry_after=2)
    with pytest.raises(openai.RateLimitError) as ei:
        oai_client.embeddings.create(model="text-embedding-3-small", input="a")
    assert ei.value.response.headers["retry-after"] == "2"
    assert ei.value.code == "rate_limit_exceeded"
    body = ei.value.response.json()["error"]
    assert set(body) == {"message", "type", "param", "code"}

    oai.fail_next(1, 503)
    with pytest.raises(openai.InternalServerError):
        oai_client.embeddings.create(model="text-embedding-3-small", input="a")
    oai.reset_next()
    with pytest.raises(openai.APIConnectionError):
        oai_client.embeddings.create(model="text-embedding-3-small", input="a")
    oai.close_next()
    with pytest.raises(openai.APIConnectionError):
        oai_client.embeddings.create(model="text-embedding-3-small", input="a")
    oai.hang_next(seconds=2)
    with pytest.raises(openai.APITimeoutError):
        oai_client.with_options(timeout=0.3).embeddings.create(model="text-embedding-3-small", input="a")
    oai.malformed_next()
    with pytest.raises(Exception):  # noqa: B017 - the SDK surfaces a JSON decode error
        oai_client.embeddings.create(model="text-embedding-3-small", input="a")

    oai.bad_payload_next("fewer")
    assert len(oai_client.embeddings.create(model="text-embedding-3-small", input=["a", "b"]).data) == 1
    oai.bad_payload_next("nan")
    r = oai_client.embeddings.create(model="text-embedding-3-small", input=["a"], encoding_format="float")
    assert math.isnan(r.data[0].embedding[0])
    oai.bad_payload_next("wrong_dims")
    assert (
        len(oai_client.embeddings.create(model="text-embedding-3-small", input="a").data[0].embedding)
        == DIMS - 1
    )
    oai.bad_payload_next("empty")
    assert oai_client.embeddings.create(model="text-embedding-3-small", input="a").data[0].embedding == []
    # the log counts everything that reached the server
    assert oai.embed_requests == 10
    assert [r.fault for r in oai.requests_of("embed")][:3] == ["status", "status", "reset"]
    oai.delay = 0.4
    with pytest.raises(openai.APITimeoutError):
        oai_client.with_options(timeout=0.2).embeddings.create(model="text-embedding-3-small", input="a")


def _openai_batch_file(
    client: openai.OpenAI, texts: dict[str, str], model: str = "text-embedding-3-small"
) -> str:
    lines = [
        json.dumps(
            {
                "custom_id": cid,
                "method": "POST",
                "url": "/v1/embeddings",
                "body": {"model": model, "input": t},
            }
        )
        for cid, t in texts.items()
    ]
    f = client.files.create(file=("in.jsonl", ("\n".join(lines) + "\n").encode()), purpose="batch")
    assert f.purpose == "batch" and f.object == "file"
    return f.id


def test_openai_batch_full_cycle(oai: OpenAIFake, oai_client: openai.OpenAI) -> None:
    oai.batch_delay = 0.5
    texts = {f"r{i}": f"text number {i}" for i in range(6)}
    fid = _openai_batch_file(oai_client, texts)
    batch = oai_client.batches.create(
        input_file_id=fid, endpoint="/v1/embeddings", completion_window="24h", metadata={"k": "v"}
    )
    assert batch.status == "validating" and isinstance(batch.created_at, int)
    seen = {batch.status}
    deadline = time.time() + 5
    while batch.status != "completed":
        assert time.time() < deadline
        time.sleep(0.02)
        batch = oai_client.batches.retrieve(batch.id)
        seen.add(batch.status)
    assert {"in_progress", "completed"} <= seen  # "finalizing" is the last 20 % of batch_delay
    assert batch.in_progress_at and batch.finalizing_at and batch.completed_at
    assert batch.request_counts is not None and batch.request_counts.completed == 6
    assert batch.output_file_id and batch.error_file_id is None
    raw = oai_client.files.content(batch.output_file_id).content
    lines = [json.loads(x) for x in raw.decode().splitlines()]
    assert sorted(x["custom_id"] for x in lines) == sorted(texts)
    for x in lines:
        assert x["error"] is None and x["response"]["status_code"] == 200 and x["id"].startswith("batch_req_")
        assert x["response"]["body"]["data"][0]["embedding"] == fake_vector(texts[x["custom_id"]], DIMS)
    assert oai.batch_submitted_ids == list(texts)
    assert sorted(oai.batch_billed_texts) == sorted(texts.values())
    assert [b.id for b in oai_client.batches.list()] == [batch.id]
    # embedding a batch text again through sync is "paid twice"
    oai_client.embeddings.create(model="text-embedding-3-small", input="text number 0")
    assert oai.paid_twice() == {"text number 0": 2}


def test_openai_batch_faulty_output(oai: OpenAIFake, oai_client: openai.OpenAI) -> None:
    texts = {f"r{i}": f"t{i}" for i in range(8)}
    oai.script_next_job(
        JobFault(
            error_lines=1,
            http_error_lines=1,
            malformed_lines=1,
            missing_lines=1,
            duplicate_lines=1,
            unknown_lines=1,
        )
    )
    fid = _openai_batch_file(oai_client, texts)
    b = oai_client.batches.create(input_file_id=fid, endpoint="/v1/embeddings", completion_window="24h")
    b = wait_status(lambda: oai_client.batches.retrieve(b.id), {"completed"})
    out = oai_client.files.content(b.output_file_id).text.splitlines()
    err = [json.loads(x) for x in oai_client.files.content(b.error_file_id).text.splitlines()]
    parsed = []
    for line in out:
        try:
            parsed.append(json.loads(line))
        except ValueError:
            parsed.append(None)
    assert parsed.count(None) == 1
    ids = [p["custom_id"] for p in parsed if p]
    assert len(ids) == 5 + 1  # 4 ok (+1 duplicate) + 1 unknown
    assert sum(1 for i in ids if i.startswith("unknown-")) == 1
    assert len(ids) - len(set(ids)) == 1
    assert {e["custom_id"] for e in err} == {"r0", "r1"}
    assert {"error" if e["error"] else e["response"]["status_code"] for e in err} == {"error", 500}
    assert "r3" not in ids  # missing


def test_openai_batch_fail_expire_cancel(oai: OpenAIFake, oai_client: openai.OpenAI) -> None:
    fid = _openai_batch_file(oai_client, {"a": "x", "b": "y"})
    oai.fail_next_job(message="Enqueued token limit reached", code="token_limit_exceeded")
    b = oai_client.batches.create(input_file_id=fid, endpoint="/v1/embeddings", completion_window="24h")
    b = wait_status(lambda: oai_client.batches.retrieve(b.id), {"failed"})
    assert b.errors and b.errors.data and b.errors.data[0].code == "token_limit_exceeded"
    assert b.output_file_id is None

    oai.expire_next_job(completed=1)
    b = oai_client.batches.create(input_file_id=fid, endpoint="/v1/embeddings", completion_window="24h")
    b = wait_status(lambda: oai_client.batches.retrieve(b.id), {"expired"})
    assert b.output_file_id and b.error_file_id
    err = json.loads(oai_client.files.content(b.error_file_id).text.splitlines()[0])
    assert err["error"]["code"] == "batch_expired" and err["response"] is None

    oai.batch_delay = None  # manual
    b = oai_client.batches.create(input_file_id=fid, endpoint="/v1/embeddings", completion_window="24h")
    assert oai_client.batches.retrieve(b.id).status == "in_progress"
    assert oai_client.batches.cancel(b.id).status == "cancelling"
    assert wait_status(lambda: oai_client.batches.retrieve(b.id), {"cancelled"}).status == "cancelled"

    b = oai_client.batches.create(input_file_id=fid, endpoint="/v1/embeddings", completion_window="24h")
    assert oai_client.batches.retrieve(b.id).status == "in_progress"
    oai.complete_job(b.id)
    assert oai_client.batches.retrieve(b.id).status == "completed"

    with pytest.raises(openai.BadRequestError):
        oai_client.batches.create(input_file_id=fid, endpoint="/v1/embeddings", completion_window="12h")  # type: ignore[arg-type]
    # duplicate custom ids in the input -> validation failure
    dup = oai_client.files.create(
        file=(
            "d.jsonl",
            b'{"custom_id":"a","method":"POST","url":"/v1/embeddings",'
            b'"body":{"model":"text-embedding-3-small","input":"q"}}\n' * 2,
        ),
        purpose="batch",
    )
    b = oai_client.batches.create(input_file_id=dup.id, endpoint="/v1/embeddings", completion_window="24h")
    b = wait_status(lambda: oai_client.batches.retrieve(b.id), {"failed"})
    assert b.errors.data[0].code == "duplicate_custom_id"  # type: ignore[union-attr]


def test_openai_batch_per_id_faults_in_output(oai: OpenAIFake, oai_client: openai.OpenAI) -> None:
    texts = {"a": "ta", "b": "tb", "c": "tc", "d": "td"}
    oai.script_next_job(
        JobFault(
            per_id={"a": "http_error", "b": "missing", "c": "bad_vector"},
            errors_in_output=True,
            shuffle=False,
        )
    )
    fid = _openai_batch_file(oai_client, texts)
    b = oai_client.batches.create(input_file_id=fid, endpoint="/v1/embeddings", completion_window="24h")
    b = wait_status(lambda: oai_client.batches.retrieve(b.id), {"completed"})
    assert b.error_file_id is None
    out = {
        x["custom_id"]: x
        for x in map(json.loads, oai_client.files.content(b.output_file_id).text.splitlines())
    }
    assert set(out) == {"a", "c", "d"}
    assert out["a"]["response"]["status_code"] == 500
    assert set(out["a"]["response"]["body"]["error"]) == {"message", "type", "param", "code"}
    assert out["c"]["response"]["body"]["data"] == []  # bad_vector="empty_data"
    assert out["d"]["response"]["body"]["data"][0]["embedding"] == fake_vector("td", DIMS)
    assert sorted(oai.batch_billed_texts) == ["tc", "td"]


def test_openai_subprocess_with_log(tmp_path: Path) -> None:
    log = tmp_path / "log.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.fakes.openai_fake",
            "--port",
            "0",
            "--dims",
            "8",
            "--delay",
            "0.05",
            "--log",
            str(log),
            "--log-texts",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line: list[str] = []
        t = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        t.start()
        t.join(10)
        assert line and line[0].startswith("READY http://127.0.0.1:"), line
        base_url = line[0].split()[1]
        client = openai.OpenAI(api_key="k", base_url=base_url, max_retries=0)
        r = client.embeddings.create(model="text-embedding-3-small", input=["a", "b", "c"])
        assert r.data[2].embedding == pytest.approx(fake_vector("c", 8))
        counts = json.loads(log.read_text())
        assert counts["embed_requests"] == 1 and counts["embedded_inputs"] == 3
        assert counts["input_texts"] == ["a", "b", "c"]
    finally:
        proc.kill()
        proc.wait(5)


# ---------------------------------------------------------------------------------------------
# Voyage
# ---------------------------------------------------------------------------------------------


def test_voyage_sync(voy: VoyageFake, vo_client: voyageai.Client) -> None:
    res = vo_client.embed(["one", "two"], model="voyage-4-large", input_type="document")
    assert close(res.embeddings[0], fake_vector("one", DIMS))
    assert close(res.embeddings[1], fake_vector("two", DIMS))
    assert res.total_tokens == 2
    body = voy.requests_of("embed")[0].body
    assert body["encoding_format"] == "base64" and body["output_dimension"] is None and "output_dtype" in body
    res = vo_client.embed(["q"], model="voyage-4-large", input_type="query", output_dimension=4)
    assert close(res.embeddings[0], fake_vector("q", 4))
    with pytest.raises(voyageai.error.InvalidRequestError):
        vo_client.embed(["x"] * 1001, model="voyage-4-large")
    with pytest.raises(voyageai.error.AuthenticationError):
        voyageai.Client(api_key="pa-bad", base_url=voy.base_url, max_retries=0).embed(
            ["a"], model="voyage-4-large"
        )


def test_voyage_faults(voy: VoyageFake, vo_client: voyageai.Client) -> None:
    voy.fail_next(1, 429)
    with pytest.raises(voyageai.error.RateLimitError):
        vo_client.embed(["a"], model="voyage-4-large")
    assert voy.requests_of("embed")[-1].status == 429
    voy.fail_next(1, 503)
    with pytest.raises(voyageai.error.ServiceUnavailableError):
        vo_client.embed(["a"], model="voyage-4-large")
    voy.fail_next(1, 500)
    with pytest.raises(voyageai.error.ServerError):
        vo_client.embed(["a"], model="voyage-4-large")
    voy.hang_next(seconds=2)
    with pytest.raises(voyageai.error.Timeout):
        voyageai.Client(api_key="pa-test", base_url=voy.base_url, max_retries=0, timeout=0.3).embed(
            ["a"], model="voyage-4-large"
        )
    voy.bad_payload_next("fewer")
    assert len(vo_client.embed(["a", "b"], model="voyage-4-large").embeddings) == 1


def test_voyage_batch_via_openai_sdk(voy: VoyageFake) -> None:
    client = openai.OpenAI(api_key="pa-test", base_url=voy.base_url, max_retries=0)
    lines = [json.dumps({"custom_id": f"c{i}", "body": {"input": [f"doc {i}"]}}) for i in range(3)]
    f = client.files.create(file=("v.jsonl", "\n".join(lines).encode()), purpose="batch")
    b = client.batches.create(
        input_file_id=f.id,
        endpoint="/v1/embeddings",
        completion_window="12h",  # type: ignore[arg-type]
        extra_body={"request_params": {"model": "voyage-4-large", "input_type": "document"}},
    )
    assert isinstance(b.created_at, str) and b.created_at.endswith("Z")
    b = wait_status(lambda: client.batches.retrieve(b.id), {"completed"})
    assert b.model_extra and b.model_extra["request_params"]["model"] == "voyage-4-large"
    out = [json.loads(x) for x in client.files.content(b.output_file_id).text.splitlines()]  # type: ignore[arg-type]
    assert sorted(o["custom_id"] for o in out) == ["c0", "c1", "c2"]
    for o in out:
        assert o["error"] is None and o["response"]["status_code"] == 200
        text = f"doc {o['custom_id'][1:]}"
        assert o["response"]["body"]["data"][0]["embedding"] == fake_vector(text, DIMS)
    with pytest.raises(openai.BadRequestError):  # Voyage only accepts 12h
        client.batches.create(
            input_file_id=f.id,
            endpoint="/v1/embeddings",
            completion_window="24h",
            extra_body={"request_params": {"model": "voyage-4-large"}},
        )
    voy.fail_next(1, 429, on="batch_create")
    with pytest.raises(openai.RateLimitError) as ei:
        client.batches.create(
            input_file_id=f.id,
            endpoint="/v1/embeddings",
            completion_window="12h",  # type: ignore[arg-type]
            extra_body={"request_params": {"model": "voyage-4-large"}},
        )
    assert "detail" in ei.value.response.json()


# ---------------------------------------------------------------------------------------------
# Gemini
# ---------------------------------------------------------------------------------------------


def test_gemini_sync(gem: GeminiFake) -> None:
    client = gclient(gem)
    res = client.models.embed_content(
        model="gemini-embedding-001",
        contents=["first", "second"],
        config=genai_types.EmbedContentConfig(task_type="RETRIEVAL_DOCUMENT", output_dimensionality=DIMS),
    )
    assert res.embeddings is not None and len(res.embeddings) == 2
    v0 = res.embeddings[0].values or []
    assert abs(math.sqrt(sum(x * x for x in v0)) - 1.0) > 0.01  # not normalised below 3072 dims
    assert close(unit(v0), fake_vector("first", DIMS), 1e-5)
    rec = gem.requests_of("embed")[0]
    assert rec.path == "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    assert rec.info["task_types"] == ["RETRIEVAL_DOCUMENT", "RETRIEVAL_DOCUMENT"]
    assert rec.body["requests"][0]["outputDimensionality"] == DIMS
    assert rec.header("x-goog-api-key") == "g-test"
    # default api version of google-genai 3.x (/v1/) works too; full 3072 dims come back normalised
    client_v1 = gclient(gem, "v1")  # keep a reference: a collected genai.Client closes its transport
    res = client_v1.models.embed_content(
        model="gemini-embedding-001",
        contents=["q"],
        config=genai_types.EmbedContentConfig(task_type="RETRIEVAL_QUERY", output_dimensionality=3072),
    )
    vals = res.embeddings[0].values or []  # type: ignore[index]
    assert len(vals) == 3072 and abs(sum(x * x for x in vals) - 1.0) < 1e-4
    assert gem.requests_of("embed")[1].path.startswith("/v1/")
    with pytest.raises(genai_errors.ClientError) as ei:
        client.models.embed_content(model="gemini-embedding-001", contents=[f"t{i}" for i in range(101)])
    assert ei.value.code == 400 and ei.value.status == "INVALID_ARGUMENT"


def test_gemini_faults(gem: GeminiFake) -> None:
    client = gclient(gem)
    gem.fail_next(1, 429, retry_after=3)
    with pytest.raises(genai_errors.ClientError) as ei:
        client.models.embed_content(model="gemini-embedding-001", contents=["a"])
    assert ei.value.code == 429 and ei.value.status == "RESOURCE_EXHAUSTED"
    gem.fail_next(1, 503)
    with pytest.raises(genai_errors.ServerError) as si:
        client.models.embed_content(model="gemini-embedding-001", contents=["a"])
    assert si.value.code == 503 and si.value.status == "UNAVAILABLE"
    gem.bad_payload_next("fewer")
    res = client.models.embed_content(model="gemini-embedding-001", contents=["a", "b"])
    assert len(res.embeddings or []) == 1
    gem.hang_next(seconds=2)
    impatient = gclient(gem, timeout_ms=300)
    with pytest.raises(Exception, match="(?i)time"):
        impatient.models.embed_content(model="gemini-embedding-001", contents=["a"])
    bad_key = genai.Client(
        api_key="bad", http_options=genai_types.HttpOptions(base_url=gem.base_url, api_version="v1beta")
    )
    with pytest.raises(genai_errors.ClientError) as ai:
        bad_key.models.embed_content(model="gemini-embedding-001", contents=["a"])
    assert ai.value.code == 400


def test_gemini_batch_file_cycle(gem: GeminiFake, tmp_path: Path) -> None:
    client = gclient(gem)
    path = tmp_path / "req.jsonl"
    texts = {f"k{i}": f"gemini doc {i}" for i in range(5)}
    path.write_text(
        "\n".join(
            json.dumps(
                {
                    "key": k,
                    "request": {
                        "content": {"parts": [{"text": t}]},
                        "taskType": "RETRIEVAL_DOCUMENT",
                        "output_dimensionality": DIMS,
                    },
                }
            )
            for k, t in texts.items()
        )
        + "\n"
    )
    uploaded = client.files.upload(file=path, config=genai_types.UploadFileConfig(mime_type="jsonl"))
    assert uploaded.name and uploaded.name.startswith("files/")
    assert gem.files[uploaded.name.removeprefix("files/")].data == path.read_bytes()
    gem.script_next_job(JobFault(error_lines=1, delay=0.1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        job = client.batches.create_embeddings(
            model="gemini-embedding-001",
            src=genai_types.EmbeddingsBatchJobSource(file_name=uploaded.name),
        )
    assert job.name and job.name.startswith("batches/")
    assert job.state == genai_types.JobState.JOB_STATE_PENDING
    deadline = time.time() + 5
    while True:
        job = client.batches.get(name=job.name)
        if job.state == genai_types.JobState.JOB_STATE_SUCCEEDED:
            break
        assert job.state in (genai_types.JobState.JOB_STATE_PENDING, genai_types.JobState.JOB_STATE_RUNNING)
        assert time.time() < deadline
        time.sleep(0.02)
    assert job.dest is not None and job.dest.file_name
    data = client.files.download(file=job.dest.file_name)
    lines = [json.loads(x) for x in data.decode().splitlines()]
    assert sorted(x["key"] for x in lines) == sorted(texts)
    errors = [x for x in lines if "error" in x]
    assert len(errors) == 1 and set(errors[0]["error"]) == {"code", "message", "status"}
    for x in lines:
        if "response" in x:
            assert close(unit(x["response"]["embedding"]["values"]), fake_vector(texts[x["key"]], DIMS), 1e-5)
    assert len(gem.batch_billed_texts) == 4

    # cancel + inline variant
    gem.batch_delay = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        job2 = client.batches.create_embeddings(
            model="gemini-embedding-001",
            src={
                "inlined_requests": genai_types.EmbedContentBatch(
                    contents=["x", "y"], config=genai_types.EmbedContentConfig(output_dimensionality=DIMS)
                )
            },
        )
    assert client.batches.get(name=job2.name).state == genai_types.JobState.JOB_STATE_RUNNING  # type: ignore[arg-type]
    gem.complete_job(job2.name)
    done = client.batches.get(name=job2.name)  # type: ignore[arg-type]
    assert done.state == genai_types.JobState.JOB_STATE_SUCCEEDED
    inl = done.dest.inlined_embed_content_responses  # type: ignore[union-attr]
    assert inl is not None and len(inl) == 2
    assert close(unit(inl[1].response.embedding.values), fake_vector("y", DIMS), 1e-5)  # type: ignore[union-attr]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        job3 = client.batches.create_embeddings(
            model="gemini-embedding-001", src=genai_types.EmbeddingsBatchJobSource(file_name=uploaded.name)
        )
    client.batches.cancel(name=job3.name)  # type: ignore[arg-type]
    assert client.batches.get(name=job3.name).state == genai_types.JobState.JOB_STATE_CANCELLED  # type: ignore[arg-type]
