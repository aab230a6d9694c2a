"""The programs a user starts, side by side over the library: the CLI (:mod:`~memory_core.apps.cli`),
the MCP server (:mod:`~memory_core.apps.mcp_server`, with the memory store's tools in
:mod:`~memory_core.apps.mcp_store_tools`), the watcher (:mod:`~memory_core.apps.watch`) and the
retrieval evaluation (:mod:`~memory_core.apps.evaluation`). The library never imports them, and
none imports another beyond the CLI handing its ``mcp``, ``watch`` and ``eval`` commands over.
"""
