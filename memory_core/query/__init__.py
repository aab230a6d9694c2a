"""The query side: answers from an index, never writes one.

- :mod:`~memory_core.query.search`: ``Searcher``, the facade (search, get, status);
- :mod:`~memory_core.query.retrieval`: the opened index, both sides' candidates, BM25 postings;
- :mod:`~memory_core.query.rank` and :mod:`~memory_core.query.ranking`: fusion, calibration,
  decay, MMR, the final score;
- :mod:`~memory_core.query.dates`: named days, dated chunks, a result's date;
- :mod:`~memory_core.query.answers`: the response shape agents get (snippets, citations);
- :mod:`~memory_core.query.reading`: ``get`` / ``memory_get`` (citations to lines);
- :mod:`~memory_core.query.status`: what ``status`` reports;
- :mod:`~memory_core.query.backends`: which searcher answers (builtin, or qmd with its fallback).

It never imports :mod:`memory_core.index` (test_layers); a reader needs only the index file.
"""
