"""Export of the chunks to Parquet (streamed, typed, readable by pyarrow and DuckDB) and JSON Lines."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from memory_core.apps.cli import main
from memory_core.config import load_settings
from memory_core.export.files import export_index, iter_export_batches, read_parquet_metadata
from memory_core.index.pipeline import run_index
from memory_core.storage.store import connect, has_table, load_vec
from tests.conftest import openai_settings

COLUMNS = ["id", "path", "source", "start_line", "end_line", "text", "model", "vector"]


def index_chunks(settings) -> dict[str, tuple]:
    conn = connect(settings.index_file, readonly=True)
    load_vec(conn)
    cols = "c.id, c.path, c.source, c.start_line, c.end_line, c.text, c.model"
    try:
        if not has_table(conn, "chunks_vec"):  # keyword-only index, or schema 3 (float32 in chunks.embedding)
            return {r[0]: r for r in conn.execute(f"SELECT {cols}, c.embedding FROM chunks c")}
        return {r[0]: r for r in conn.execute(
            f"SELECT {cols}, coalesce(c.embedding, v.embedding) FROM chunks c LEFT JOIN chunks_vec v ON v.rowid = c.rid")}
    finally:
        conn.close()


@pytest.fixture
def vector_index(workspace, openai_fake):
    s = openai_settings(workspace, openai_fake, sources=["memory", "sessions"])
    run_index(s)
    return s


@pytest.fixture
def keyword_index(workspace):
    s = load_settings(None, {"workspace": str(workspace), "provider": "none"})
    run_index(s)
    return s


def test_parquet_round_trip_with_vectors(vector_index, tmp_path):
    out = tmp_path / "chunks.parquet"
    summary = export_index(vector_index.index_file, out, "parquet", batch_rows=16)
    chunks = index_chunks(vector_index)
    assert summary.rows == len(chunks) > 40 and summary.dims == 64
    assert (os.stat(out).st_mode & 0o077) == 0  # private, like the index
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp file left

    pf = pq.ParquetFile(out)
    assert pf.metadata.num_row_groups == math.ceil(len(chunks) / 16) == summary.row_groups  # streamed
    table = pq.read_table(out)
    schema = table.schema
    assert schema.names == COLUMNS
    assert schema.field("id").type == pa.string() and not schema.field("id").nullable
    assert schema.field("start_line").type == pa.int32() and schema.field("end_line").type == pa.int32()
    assert schema.field("vector").type == pa.list_(pa.float32(), 64)
    meta = read_parquet_metadata(out)
    assert meta["memory_core.dims"] == "64" and meta["memory_core.provider"] == "openai"
    assert meta["memory_core.model"] == "text-embedding-3-small"

    rows = table.to_pylist()
    assert {r["id"] for r in rows} == set(chunks)
    assert {r["source"] for r in rows} == {"memory", "sessions"}
    vectors = table.column("vector").combine_chunks().flatten().to_numpy().reshape(-1, 64)
    for i, r in enumerate(rows):
        c = chunks[r["id"]]
        assert (r["path"], r["source"], r["start_line"], r["end_line"], r["text"], r["model"]) == c[1:7]
        assert np.array_equal(vectors[i], np.frombuffer(c[7], dtype="<f4"))  # bit-exact


def test_duckdb_reads_the_export_with_the_right_types(vector_index, tmp_path):
    duckdb = pytest.importorskip("duckdb")
    out = tmp_path / "chunks.parquet"
    export_index(vector_index.index_file, out, "parquet")
    con = duckdb.connect()
    types = dict(con.execute(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM '{out}')").fetchall())
    assert types["id"] == "VARCHAR" and types["text"] == "VARCHAR"
    assert types["start_line"] == "INTEGER" and types["end_line"] == "INTEGER"
    assert types["vector"] in ("FLOAT[]", "FLOAT[64]")
    n, = con.execute(f"SELECT count(*) FROM '{out}'").fetchone()
    assert n == len(index_chunks(vector_index))
    # nearest neighbours of one chunk's vector, in SQL: itself first
    cid, = con.execute(f"SELECT id FROM '{out}' LIMIT 1").fetchone()
    top = con.execute(
        f"""SELECT id FROM '{out}' ORDER BY array_cosine_similarity(vector::FLOAT[64],
            (SELECT vector::FLOAT[64] FROM '{out}' WHERE id = ?)) DESC LIMIT 1""", [cid]).fetchone()[0]
    assert top == cid


def test_keyword_only_index_exports_null_vectors(keyword_index, tmp_path):
    out = tmp_path / "kw.parquet"
    summary = export_index(keyword_index.index_file, out)
    table = pq.read_table(out)
    assert summary.dims is None and table.num_rows == summary.rows > 20
    assert table.schema.field("vector").type == pa.list_(pa.float32())
    assert table.column("vector").null_count == table.num_rows
    assert set(table.column("model").to_pylist()) == {"none"}


def test_jsonl_round_trip(vector_index, tmp_path):
    out = tmp_path / "chunks.jsonl"
    summary = export_index(vector_index.index_file, out, "jsonl")
    chunks = index_chunks(vector_index)
    recs = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(recs) == summary.rows == len(chunks)
    for r in recs:
        assert list(r) == COLUMNS
        c = chunks[r["id"]]
        assert (r["path"], r["source"], r["start_line"], r["end_line"], r["text"], r["model"]) == c[1:7]
        assert np.array_equal(np.asarray(r["vector"], dtype=np.float32), np.frombuffer(c[7], dtype="<f4"))


def test_an_export_reads_one_snapshot_while_a_reindex_swaps(keyword_index):
    before = len(index_chunks(keyword_index))
    batches = iter_export_batches(keyword_index.index_file, batch_rows=8)
    first = next(batches)
    (keyword_index.workspace_dir / "memory" / "howto" / "deploy-checklist.md").unlink()
    (keyword_index.workspace_dir / "memory" / "new.md").write_text("# New\n" + "more text\n" * 50)
    assert run_index(keyword_index).swapped
    total = first.num_rows + sum(b.num_rows for b in batches)
    assert total == before != len(index_chunks(keyword_index))


def test_cli_export(keyword_index, tmp_path, capsys):
    ws = str(keyword_index.workspace_dir)
    out = tmp_path / "x.parquet"
    assert main(["export", "-w", ws, "--format", "parquet", str(out)]) == 0
    assert capsys.readouterr().out.startswith("exported ")
    assert pq.read_table(out).num_rows > 20

    assert main(["export", "-w", ws, "--no-vectors", "--json", str(tmp_path / "nv.parquet")]) == 0
    assert json.loads(capsys.readouterr().out)["vectors"] is False
    assert "vector" not in pq.read_schema(tmp_path / "nv.parquet").names

    assert main(["export", "-w", ws, "-"]) == 0  # JSON Lines on stdout, the summary on stderr
    cap = capsys.readouterr()
    recs = [json.loads(x) for x in cap.out.splitlines()]
    assert len(recs) > 20 and recs[0]["vector"] is None and "exported" in cap.err

    assert main(["export", "-w", ws, "--format", "parquet", "-"]) == 2
    assert "cannot be written to stdout" in capsys.readouterr().err
    assert main(["export", "-w", ws, "--index", str(tmp_path / "none.sqlite"), str(tmp_path / "y.parquet")]) == 2
    err = capsys.readouterr().err
    assert "no index at" in err and err.count("\n") == 1
    assert not (tmp_path / "y.parquet").exists()
    assert main(["export", "-w", ws, str(tmp_path / "missing-dir" / "z.parquet")]) == 2
    assert "directory not found" in capsys.readouterr().err


def test_a_damaged_index_is_a_clear_error(tmp_path: Path, capsys):
    bad = tmp_path / "index.sqlite"
    bad.write_bytes(b"not sqlite at all" * 100)  # not ours (issue 17): refused as a usage error
    assert main(["export", "-w", str(tmp_path), "--index", str(bad), str(tmp_path / "o.parquet")]) == 2
    assert "not a memory-core index" in capsys.readouterr().err


def test_export_never_replaces_a_file_that_is_not_an_earlier_export(keyword_index, tmp_path, capsys):
    """issue 22 #1: PATH was replaced whatever it was: a note, the live index, the cache."""
    ws = str(keyword_index.workspace_dir)
    note = keyword_index.workspace_dir / "memory" / "note-to-keep.md"
    note.write_text("# mine\n")
    index_bytes = keyword_index.index_file.read_bytes()
    keyword_index.cache_file.write_bytes(b"")  # whatever the cache holds, it is never the output
    targets = [(note, "jsonl"), (keyword_index.index_file, "jsonl"), (keyword_index.cache_file, "parquet"),
               (Path(str(keyword_index.index_file) + ".lock"), "jsonl")]
    for target, fmt in targets:
        if not target.exists():
            target.write_bytes(b"")
        before = target.read_bytes()
        assert main(["export", "-w", ws, "--format", fmt, str(target)]) == 2, target
        err = capsys.readouterr().err
        assert "refusing" in err and err.count("\n") == 1
        assert target.read_bytes() == before
    # --force replaces a user's file, never memory-core's own ones
    assert main(["export", "-w", ws, "--format", "jsonl", "--force", str(keyword_index.index_file)]) == 2
    assert "memory-core's own file" in capsys.readouterr().err
    assert main(["export", "-w", ws, "--format", "jsonl", "--force", str(keyword_index.cache_file)]) == 2
    assert keyword_index.index_file.read_bytes() == index_bytes
    assert main(["export", "-w", ws, "--format", "jsonl", "--force", str(note)]) == 0
    assert json.loads(note.read_text().splitlines()[0])["id"]
    # an earlier export is replaced without --force (Parquet and JSON Lines)
    for name in ("again.parquet", "again.jsonl"):
        assert main(["export", "-w", ws, str(tmp_path / name)]) == 0
        assert main(["export", "-w", ws, str(tmp_path / name)]) == 0
    capsys.readouterr()


@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="needs /dev/null")
def test_export_refuses_a_symlink_or_a_device(keyword_index, tmp_path, capsys):
    ws = str(keyword_index.workspace_dir)
    link = tmp_path / "link.jsonl"
    link.symlink_to(tmp_path / "elsewhere.jsonl")
    for target in (link, Path("/dev/null")):
        assert main(["export", "-w", ws, "--format", "jsonl", "--force", str(target)]) == 2
        assert "refusing" in capsys.readouterr().err
    assert link.is_symlink() and not (tmp_path / "elsewhere.jsonl").exists()
