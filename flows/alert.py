"""The ``alert`` flow: what memory-core's automations run when an index needs a person.

``deployments/prefect.yaml`` attaches two triggers to its ``alerts`` deployment:

- ``stale-index`` (proactive): no ``memory-core.index.swapped`` event for an index in 6 hours,
  although its scheduled reindex runs every 15 minutes: a stuck schedule, a worker that is down,
  or runs that keep failing;
- ``fallback`` (reactive): a ``memory-core.fallback.provider`` or ``.batch-to-sync`` event: the
  run finished, but not the way it was configured to (another provider, or sync calls that cost
  more than the Batch API).

Each alert is a flow run of its own, so it shows in the UI's run list and can be routed to
e-mail, Slack and so on with one more automation on ``prefect.flow-run.Completed`` of this flow
(a notification block is the operator's to choose).
"""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact


@flow(name="alert", flow_run_name="alert-{kind}", log_prints=False)
def alert(kind: str, detail: str = "", index: str = "") -> str:
    """Record one alert about a memory-core index (a warning in the logs and a markdown artifact).

    Args:
        kind: stale-index or fallback.
        detail: what happened, from the triggering event.
        index: the index's resource id (memory-core.index.<absolute path>), when known.
    """
    where = index.removeprefix("memory-core.index.") or "an index"
    text = {
        "stale-index": f"{where} was not updated for 6 hours: check the reindex deployments' runs and worker",
        "fallback": f"a run of {where} fell back: {detail}",
    }.get(kind, f"{kind}: {detail}")
    get_run_logger().warning("memory-core alert: %s", text)
    create_markdown_artifact(f"# memory-core alert: {kind}\n\n{text}\n", key=f"memory-core-alert-{kind}",
                             description=text[:200])
    return text
