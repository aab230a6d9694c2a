"""The search side of the QMD backend: :class:`QmdSearcher`, qmd first, the builtin index as the fallback.

Runs ``qmd search|vsearch|query --json``, reads its answer (:func:`parse_results`) and maps
each hit back to memory-core's paths and lines through the table the reindex side wrote
(``<state>/paths.json``); when qmd cannot answer, or answers with nothing while the builtin
index has strong matches, the builtin :class:`~memory_core.query.search.Searcher` answers and the
answer says so (and a ``memory-core.search.qmd-fallback`` event is emitted when an engine
takes events).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import time
from dataclasses import dataclass, replace
from typing import Any

from memory_core.config import Settings
from memory_core.errors import MemoryCoreError
from memory_core.query.results import MemoryStatus, QmdReport, SearchRun
from memory_core.query.search import Searcher, SearchResult
from memory_core.storage.qmd import (
    QmdError,
    QmdRun,
    _read_json,
    _record,
    clean,
    load_status,
    plan_collections,
    resolve_command,
    run_qmd,
    state_dir,
)
from memory_core.storage.textsearch import well_formed

log = logging.getLogger("memory_core.qmd")

_HEADER = re.compile(r"^@@ -(\d+),(\d+) @@[^\n]*\n?")
_NO_RESULTS = ("No results found",)


@dataclass(frozen=True)
class QmdHit:
    collection: str
    path: str  # qmd's (handelized) path inside the collection
    score: float
    snippet: str
    start_line: int
    end_line: int



def parse_results(stdout: str, stderr: str = "") -> list[QmdHit]:
    """qmd's ``--json`` answer as hits; QmdError("unreadable") when it is not that.

    qmd prints ``No results found...`` (not ``[]``) when nothing matched."""
    text = stdout.strip()
    if not text or text.startswith(_NO_RESULTS):
        return []
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        raise QmdError("unreadable", f"qmd printed something that is not JSON: {clean(text)[:120]!r}") from None
    if not isinstance(data, list):
        raise QmdError("unreadable", "qmd's JSON answer is not a list of results")
    hits: list[QmdHit] = []
    for row in data:
        if not isinstance(row, dict) or not isinstance(row.get("file"), str):
            raise QmdError("unreadable", f"a qmd result without a file: {str(row)[:120]}")
        uri = row["file"]
        if not uri.startswith("qmd://") or "/" not in uri[6:]:
            raise QmdError("unreadable", f"a qmd result with an unexpected file name: {uri[:120]}")
        collection, path = uri[6:].split("/", 1)
        raw_snippet = row.get("snippet")
        snippet = raw_snippet if isinstance(raw_snippet, str) else ""
        # a lone surrogate (JSON allows "\ud800") cannot be printed or sent as UTF-8
        snippet = snippet.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        start, count = 1, 1
        m = _HEADER.match(snippet)
        if m:
            start, count = int(m.group(1)), max(1, int(m.group(2)))
            snippet = snippet[m.end():]
        lines = snippet.split("\n")
        while count > 1 and lines and lines[-1] == "":
            lines.pop()
            count -= 1
        try:
            score = float(row.get("score", 0.0))
        except (TypeError, ValueError, OverflowError):
            raise QmdError("unreadable", f"a qmd result with a bad score: {str(row.get('score'))[:40]!r}") from None
        if not (math.isfinite(score) and -1.0 <= score <= 1.0):  # NaN made the answer invalid JSON
            raise QmdError("unreadable", f"a qmd result with a score outside -1..1: {score!r}")
        hits.append(QmdHit(collection, path, score, "\n".join(lines), start, start + count - 1))
    return hits


def _which_file(settings: Settings, candidates: list[dict[str, Any]], hit: QmdHit) -> dict[str, Any] | None:
    """The one candidate file whose lines ``hit`` cites hold its snippet; None when not exactly one."""
    from memory_core.sources.safeio import open_indexed

    want = [ln.strip() for ln in hit.snippet.split("\n") if ln.strip()]
    found = []
    for c in candidates:
        try:
            fd = open_indexed(settings, str(c["path"]), source=str(c["source"]) if c.get("source") else None)
        except MemoryCoreError:
            continue
        with os.fdopen(fd, "rb") as fh:
            lines = [fh.readline(1 << 20) for _ in range(hit.end_line)][hit.start_line - 1:]
        text = "\n".join(ln.decode("utf-8", "replace").strip() for ln in lines)
        if want and all(w in text for w in want[:3]):
            found.append(c)
    return found[0] if len(found) == 1 else None


class QmdSearcher(Searcher):
    """A :class:`Searcher` whose hybrid search asks qmd first and the builtin index when qmd cannot answer.

    ``mode="keyword"`` / ``"vector"`` (evaluation's single-side modes) stay builtin. ``get``
    and the builtin part of ``status`` are the builtin searcher's.
    """

    def __init__(self, settings: Settings, **kw: Any) -> None:
        super().__init__(settings, **kw)
        self.backend_note = ""
        self._paths: tuple[float, dict[str, dict[str, Any]]] | None = None

    @property
    def provider_note(self) -> str:
        notes = [n for n in (self.backend_note, self._builtin_note if self.backend_note else "") if n]
        return "; ".join(notes)

    @provider_note.setter
    def provider_note(self, value: str) -> None:
        self._builtin_note = value

    def _path_table(self) -> dict[str, dict[str, Any]]:
        p = state_dir(self.settings) / "paths.json"
        try:
            mtime = p.stat().st_mtime
        except OSError:
            raise QmdError("missing", "qmd has not indexed this workspace yet (run `memory-core index`)") from None
        if self._paths is None or self._paths[0] != mtime:
            data = _read_json(p)
            if not isinstance(data, dict):
                raise QmdError("unreadable", f"{p} is damaged; run `memory-core index`")
            self._paths = (mtime, data)
        return self._paths[1]

    def qmd_search(self, query: str, max_results: int, min_score: float | None,
                   sources: list[str] | None) -> list[SearchResult]:
        """qmd's hits as results, thresholded as the builtin index thresholds its own: none when
        the best scores below ``min_score`` (else the settings' ``query.min_score``), else those
        scoring at least ``query.result_floor``; cited within their files' real lines."""
        mode = self.settings.qmd.search_mode
        min_score = self.settings.query.threshold(min_score)
        floor = min(self.settings.query.result_floor, min_score)
        n = max_results * 4 if sources else max_results
        args = [mode, "--json", "-n", str(n)]
        if floor > 0:
            args += ["--min-score", str(floor)]
        out, err = run_qmd(self.settings, [*args, "--", query], timeout=self.settings.qmd.timeout_s)
        hits = parse_results(out, err)
        if hits and max(h.score for h in hits) < min_score:
            hits = []  # the answer's threshold: nothing matches this well
        if not hits and "need embeddings" in err and "(100%)" in err:
            raise QmdError("failed", f"qmd {mode} has no vectors yet (run `qmd embed`)")
        table = self._path_table()
        results: list[SearchResult] = []
        seen: set[tuple[str, int, int]] = set()
        from memory_core.errors import PathError
        from memory_core.query.dates import chunk_date
        from memory_core.query.reading import indexed_transcript_dates, line_total
        from memory_core.sources.redact import redact_lines

        record = self.index_record()
        redact_notes = ((record.redact if record else None) or self.settings.redact) == "all"
        match = {"search": "keyword", "vsearch": "vector"}.get(mode, "both")
        for h in hits:
            if h.score < floor:
                continue  # qmd's own --min-score is not applied by every mode
            info = table.get(h.collection, {}).get(h.path)
            if info is not None and "ambiguous" in info:
                info = _which_file(self.settings, info["ambiguous"], h)
            if info is None or (str(info["path"]), h.start_line, h.end_line) in seen:
                continue  # not a file memory-core indexes; or one reached through two collections
            seen.add((str(info["path"]), h.start_line, h.end_line))
            start, end = h.start_line, h.end_line
            if info.get("line_map"):  # an exported transcript: back to its JSONL lines
                lm = info["line_map"]
                start = lm[min(max(start, 1), len(lm)) - 1]
                end = lm[min(max(end, 1), len(lm)) - 1]
            else:  # qmd's line header is its word, not the file's: cite lines the file has
                last = line_total(self.settings, str(info["path"]), str(info["source"]))
                if last is None:
                    continue  # the file is gone or no longer indexed: nothing to cite
                if start > last:  # past the file: its first lines, as many as the hit has
                    start, end = 1, min(last, max(1, end - start + 1))
                else:
                    start, end = max(start, 1), min(max(end, start), last)
            source = str(info["source"])
            if sources and source not in sources:
                continue
            path = str(info["path"])
            stamps = None
            if source == "sessions":
                with contextlib.suppress(PathError):
                    stamps = indexed_transcript_dates(self.settings, path)
            # qmd indexes the raw notes: with redact = "all" (a hosted provider) the snippet is
            # masked as the builtin index's text is; transcripts were exported redacted already
            snippet = redact_lines(h.snippet) if (redact_notes and source != "sessions") else h.snippet
            score = max(0.0, h.score)
            results.append(SearchResult(path=path, start_line=start, end_line=end, score=score,
                                        snippet=snippet, source=source, citation=f"{path}#L{start}-L{end}",
                                        text_score=score if mode == "search" else 0.0,
                                        vector_score=score if mode == "vsearch" else 0.0, match=match,
                                        date=chunk_date(path, source, start, end, None, dates=stamps)))
        if hits and not results and not sources:
            raise QmdError("unreadable", "qmd answered with files memory-core does not index (run `memory-core index`)")
        return results[:max_results]

    def search(self, query: str, max_results: int | None = None, min_score: float | None = None,
               sources: list[str] | None = None, *, mode: str | None = None) -> list[SearchResult]:
        mode = self.settings.query.search_mode() if mode is None else mode
        if mode != "hybrid" or not (query or "").strip():  # qmd answers hybrid searches; the rest is builtin
            return super().search(query, max_results, min_score, sources, mode=mode)
        n = self.settings.query.max_results if max_results is None else max(1, int(max_results))
        t0 = time.time()
        name = f"{self.settings.qmd.search_mode}"
        try:
            results = self.qmd_search(well_formed(query), n, min_score, sources)
        except QmdError as exc:
            self.backend_note = f"qmd {name} failed ({exc}); answered from the builtin index"
            log.warning("%s", self.backend_note)
            _record(self.settings, "last_search",
                    QmdRun(name, False, t0, time.time() - t0, error=str(exc), kind=exc.kind),
                    fallback_in_use=True, fallback_reason=str(exc))
            _emit_fallback_event(self.settings, exc)
            out = super().search(query, max_results, min_score, sources, mode=mode)
            self.last_search = replace(self.last_search, qmd_fallback=f"qmd {name} failed ({exc})")
            return out
        if not results and self.settings.qmd.fallback_on_empty:
            # qmd's `search` ANDs every query word: a question in plain words mostly finds
            # nothing there while the builtin index (OR semantics, vectors) has clear matches
            builtin = super().search(query, max_results, min_score, sources, mode=mode)
            floor = self.settings.qmd.fallback_min_score
            strong = sum(1 for r in builtin if r.score >= floor)
            if strong:
                reason = (f"qmd {name} found nothing; the builtin index has {strong} strong match"
                          f"{'es' if strong != 1 else ''} (score >= {floor:g})")
                self.backend_note = f"{reason}; answered from the builtin index"
                _record(self.settings, "last_search", QmdRun(name, True, t0, time.time() - t0),
                        fallback_in_use=True, fallback_reason=reason)
                _emit_fallback_event(self.settings, QmdError("empty", reason))
                self.last_search = replace(self.last_search, qmd_fallback=reason)
                return builtin
        self.backend_note = ""
        _record(self.settings, "last_search", QmdRun(name, True, t0, time.time() - t0),
                fallback_in_use=False, fallback_reason="")
        self.last_search = SearchRun(backend="qmd", qmd_mode=name, embedded=name != "search")
        return results

    def status(self, *, measure: bool = False) -> MemoryStatus:
        qs = load_status(self.settings)
        try:
            command: str | None = resolve_command(self.settings)
        except QmdError:
            command = None
        fallback, reason = qs.fallback_in_use, qs.fallback_reason
        if command is None:
            fallback, reason = True, f"the qmd command {self.settings.qmd.command!r} was not found"
        report = QmdReport(command=command, search_mode=self.settings.qmd.search_mode,
                           index_name=self.settings.qmd.index_name, state_dir=str(state_dir(self.settings)),
                           collections=plan_collections(self.settings), fallback_in_use=fallback,
                           fallback_reason=reason, last_search=qs.last_search, last_update=qs.last_update,
                           last_embed=qs.last_embed)
        return replace(super().status(measure=measure), backend="qmd", qmd=report)


def _emit_fallback_event(settings: Settings, exc: QmdError) -> None:
    """A Prefect event for Automations, when a Prefect API is configured (never raises)."""
    from memory_core.plugins import emit_event_if_configured

    emit_event_if_configured("memory-core.search.qmd-fallback", settings.index_file,
                             {"kind": exc.kind, "reason": str(exc)[:500]})
