"""The LanceDB export on object storage (`s3://...`): a real S3 API (moto's server on 127.0.0.1),
real LanceDB, real SQLite. Object storage has no rename, so an export replaces both tables in place,
version after version; a reader must still see one whole export, the previous one while an export
is under way or after one stopped (docs/lancedb-index.md, "Object storage")."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memory_core.apps.cli import main
from memory_core.config import load_settings
from tests.test_export_audit import (
    export_then_stop_the_next,
    keyword_ws,  # noqa: F401  (a fixture)
    readers_through_exports,
)

BUCKET = "memory-exports"


@pytest.fixture
def s3_uri(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An empty bucket on an S3 server on 127.0.0.1; LanceDB finds it through the environment, as
    a user's credentials and endpoint would be found."""
    boto3 = pytest.importorskip("boto3")
    server_mod = pytest.importorskip("moto.server")
    srv = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    srv.start()
    try:
        host, port = srv.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        for k, v in {"AWS_ACCESS_KEY_ID": "test-key-id", "AWS_SECRET_ACCESS_KEY": "test-secret",
                     "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1",
                     "AWS_ENDPOINT": endpoint, "AWS_ALLOW_HTTP": "true"}.items():
            monkeypatch.setenv(k, v)
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=BUCKET)
        yield f"s3://{BUCKET}/exports/memory"
    finally:
        srv.stop()


def _objects(uri: str) -> list[str]:
    import os

    import boto3
    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT"])
    prefix = uri.split(f"s3://{BUCKET}/", 1)[1]
    return [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
            for o in page.get("Contents", [])]


def test_an_export_to_object_storage_answers_as_a_local_one(keyword_ws: Path, s3_uri: str,  # noqa: F811
                                                             tmp_path: Path, capsys: Any) -> None:
    ws, local = str(keyword_ws), str(tmp_path / "ldb")
    for uri in (local, s3_uri):
        assert main(["export", "-w", ws, "--format", "lancedb", uri]) == 0
    capsys.readouterr()
    assert any(k.endswith(".lance") or "/chunks.lance/" in k for k in _objects(s3_uri))
    for q in ("billing migrate", "restaurant office", "decision platform team"):
        answers = []
        for uri in (local, s3_uri):
            assert main(["search", "-w", ws, q, "--lancedb", uri, "--json"]) == 0
            answers.append([(r["path"], r["startLine"], r["score"]) for r in json.loads(capsys.readouterr().out)["results"]])
        assert answers[0] and answers[0] == answers[1], q


def test_a_stopped_export_on_object_storage_leaves_the_previous_one_searchable(
        keyword_ws: Path, s3_uri: str, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    ws = str(keyword_ws)
    export_then_stop_the_next(keyword_ws, s3_uri, monkeypatch)
    capsys.readouterr()
    # the chunks table now holds the new rows without their full-text index (replaced in place):
    # before, every search said "the export is incomplete", exit 2, until a new export finished
    assert main(["search", "-w", ws, "billing migrate", "--lancedb", s3_uri, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["path"] == "memory/plan.md"
    assert main(["search", "-w", ws, "zebrafish", "--lancedb", s3_uri]) == 0  # not in the previous export
    out = capsys.readouterr()
    assert out.out.strip() == "no results"
    # the next export is whole, is what readers get, and leaves no older version behind
    assert main(["export", "-w", ws, "--format", "lancedb", s3_uri]) == 0
    capsys.readouterr()
    assert main(["search", "-w", ws, "zebrafish", "--lancedb", s3_uri, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["path"] == "memory/zebra.md"
    import lancedb

    db = lancedb.connect(s3_uri)
    assert [len(db.open_table(n).list_versions()) for n in ("chunks", "terms")] == [1, 1]


def test_a_reader_during_an_export_on_object_storage_gets_the_previous_export(
        keyword_ws: Path, s3_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """An export held between its two tables (the chunks replaced and indexed, `terms` not yet:
    a large export spends minutes there): a searcher opened then answers from the previous export.
    Before, it retried for 1 s and said the export was incomplete."""
    from lancedb.db import LanceDBConnection

    from memory_core.export.lancedb import export_lancedb
    from memory_core.query.lancedb import LanceSearcher

    settings = load_settings(None, {"workspace": str(keyword_ws), "provider": "none"})
    export_lancedb(settings.index_file, s3_uri)
    (keyword_ws / "memory" / "zebra.md").write_text("# Zebra\n\nThe zebrafish tank pump is serviced quarterly.\n")
    assert main(["index", "-w", str(keyword_ws)]) == 0
    real = LanceDBConnection.create_table
    between, go_on = threading.Event(), threading.Event()

    def held(self: Any, name: str, *a: Any, **k: Any) -> Any:
        if name == "terms":
            between.set()
            go_on.wait(30)
        return real(self, name, *a, **k)

    monkeypatch.setattr(LanceDBConnection, "create_table", held)
    errors: list[BaseException] = []

    def export() -> None:
        try:
            export_lancedb(settings.index_file, s3_uri)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    writer = threading.Thread(target=export)
    writer.start()
    try:
        assert between.wait(30)
        with LanceSearcher(settings, s3_uri) as ls:
            assert ls.previous_export and ls.status()["previous_export"] is True
            assert [r.path for r in ls.search("billing migrate", min_score=0, mode="keyword")] == ["memory/plan.md"]
            assert ls.search("zebrafish", min_score=0, mode="keyword") == []
    finally:
        go_on.set()
        writer.join()
    assert not errors, errors[:1]
    with LanceSearcher(settings, s3_uri) as ls:  # the new export, whole
        assert not ls.previous_export
        assert [r.path for r in ls.search("zebrafish", min_score=0, mode="keyword")] == ["memory/zebra.md"]


def test_readers_see_a_whole_export_while_it_is_replaced_on_object_storage(
        keyword_ws: Path, s3_uri: str) -> None:  # noqa: F811
    readers_through_exports(keyword_ws, s3_uri, 3)
