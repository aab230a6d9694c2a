"""What is indexed, read safely: the lowest layer of the indexing side.

- :mod:`~memory_core.sources.discovery`: which files are sources (MEMORY.md, memory/**/*.md,
  extra paths, transcripts), their hashes and the diff against the live index;
- :mod:`~memory_core.sources.sessions`: transcripts (JSONL) to text with a line map;
- :mod:`~memory_core.sources.redact`: secrets taken out before anything is chunked or embedded;
- :mod:`~memory_core.sources.safeio`: opening a source or a cited file without following a path
  out of the workspace;
- :mod:`~memory_core.sources.freshness`: whether the live index is behind its sources (``status``
  and the sync triggers ask it; it reads, never writes).

Both sides use it (the indexer to read sources, the reader to answer a citation); it imports
neither.
"""
