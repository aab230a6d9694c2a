"""Embedding providers: one protocol, one registry, shared request grouping and retries."""

from memory_core.embeddings.base import EmbeddingProvider, ProviderInfo
from memory_core.embeddings.registry import create_provider, provider_names

__all__ = ["EmbeddingProvider", "ProviderInfo", "create_provider", "provider_names"]
