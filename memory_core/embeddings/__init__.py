"""Embedding providers: one protocol (:mod:`~memory_core.embeddings.base`, every fact about a provider
a class attribute, the chunk defaults), one file each, one registry
(:mod:`~memory_core.embeddings.registry`, :mod:`~memory_core.embeddings.catalog`), shared request
grouping and retries, the providers' Batch API clients and shapes
(:mod:`~memory_core.embeddings.batch_clients`, :mod:`~memory_core.embeddings.batch_types`) and prices
(:mod:`~memory_core.embeddings.cost`).

Nothing is imported at package level, so importing one module never loads numpy or a provider.
"""
