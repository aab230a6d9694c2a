"""Copies of the index for other tools and machines: Parquet and JSONL files (:mod:`~memory_core.export.files`)
and a LanceDB table (:mod:`~memory_core.export.lancedb`). Read-only on the index; above the query side
(the LanceDB export records the index's calibration background).
"""
