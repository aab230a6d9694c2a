"""How the library runs in a program: which settings a call uses (:mod:`~memory_core.runtime.resolve`),
which agent it serves (:mod:`~memory_core.runtime.agents`), when a long-lived reader syncs
(:mod:`~memory_core.runtime.sync`), the file watcher and its scheduler
(:mod:`~memory_core.runtime.watching`) and how an orchestrator such as Prefect plugs in
(:mod:`~memory_core.runtime.engines`). Above the indexing and query sides; below the API and the apps.
"""
