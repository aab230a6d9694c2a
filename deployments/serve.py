"""Serve the memory-core deployments from this machine, without a work pool or a worker.

    export PREFECT_API_URL=http://127.0.0.1:4200/api
    export MEMORY_CORE_WORKSPACE=~/agent
    python deployments/serve.py

The deployments (names, flows, schedules, parameters, concurrency limits) are read from
``deployments/prefect.yaml``, so a served setup and a worker setup are the same deployments;
``{{ $VAR }}`` placeholders are filled from the environment, as ``prefect deploy`` does (an unset
variable leaves its parameter empty, with a warning here). The
process stays in the foreground, polls the server for scheduled and ad hoc runs, and runs each
in a subprocess; Ctrl-C stops it (runs in progress are cancelled, the live index untouched).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PREFECT_FILE = Path(__file__).resolve().parent / "prefect.yaml"


def _read_specs(path: Path, only: list[str] | None) -> list[dict[str, Any]]:
    """The deployments of ``prefect.yaml`` as written (placeholders unfilled), ``only`` those named."""
    import yaml

    with open(path) as fh:
        doc = yaml.safe_load(fh) or {}
    specs: list[dict[str, Any]] = list(doc.get("deployments") or [])
    if only:
        unknown = set(only) - {s["name"] for s in specs}
        if unknown:
            raise SystemExit(f"serve.py: no deployment named {', '.join(sorted(unknown))} in {path}")
        specs = [s for s in specs if s["name"] in only]
    return specs


def _env_placeholders(value: Any) -> Iterator[tuple[str, str]]:
    """``({{ $VAR }} as written, VAR)`` for each environment placeholder in ``value`` (recursively),
    parsed as Prefect parses them."""
    from prefect.utilities.templating import PlaceholderType, find_placeholders

    if isinstance(value, dict):
        for v in value.values():
            yield from _env_placeholders(v)
    elif isinstance(value, list):
        for v in value:
            yield from _env_placeholders(v)
    elif isinstance(value, str):
        for p in find_placeholders(value):
            if p.type is PlaceholderType.ENV_VAR:
                yield p.full_match, p.name.lstrip("$")


def fill_env(value: Any, env: dict[str, str] | None = None) -> Any:
    """``value`` with every ``{{ $VAR }}`` replaced by ``$VAR``, or by nothing when it is unset: what
    ``prefect deploy`` stores (its last templating pass empties the unset ones). Other placeholders
    (``{{ event.* }}`` in a trigger's parameters, ``{{ ctx.* }}``) are left for whoever fills them."""
    env = dict(os.environ) if env is None else env
    if isinstance(value, dict):
        return {k: fill_env(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [fill_env(v, env) for v in value]
    if isinstance(value, str):
        found = dict(_env_placeholders(value))
        if found:
            from prefect.utilities.templating import PLACEHOLDER_CAPTURE_REGEX

            # one pass over the template: a value is never read as a placeholder itself
            return PLACEHOLDER_CAPTURE_REGEX.sub(
                lambda m: env.get(found[m.group(1)], "") if m.group(1) in found else m.group(1), value)
    return value


def load_specs(path: Path = PREFECT_FILE, only: list[str] | None = None) -> list[dict[str, Any]]:
    """The deployments of ``prefect.yaml`` with ``{{ $VAR }}`` filled from the environment (empty
    when it is unset, as ``prefect deploy`` leaves it): the parameters served are what a run gets."""
    return [fill_env(s) for s in _read_specs(path, only)]


def unset_placeholders(path: Path = PREFECT_FILE, only: list[str] | None = None) -> list[str]:
    """The ``{{ $VAR }}`` names the (``only``) deployments use that the environment does not set:
    their parameters are served empty, as ``prefect deploy --all`` leaves them (without a word:
    the fleet deployment's config_file)."""
    names = {name for _, name in _env_placeholders(_read_specs(path, only))}
    return sorted(n for n in names if not os.environ.get(n, "").strip())


def to_deployment(spec: dict[str, Any]) -> Any:
    """A RunnerDeployment for one ``prefect.yaml`` deployment (its work pool is not used)."""
    from prefect.client.schemas.objects import ConcurrencyLimitConfig
    from prefect.flows import load_flow_from_entrypoint
    from prefect.schedules import Cron, Interval

    flow: Any = load_flow_from_entrypoint(spec["entrypoint"])
    schedules = []
    for s in spec.get("schedules") or []:
        if "interval" in s:
            schedules.append(Interval(float(s["interval"]), timezone=s.get("timezone"), active=s.get("active", True)))
        elif "cron" in s:
            schedules.append(Cron(s["cron"], timezone=s.get("timezone"), active=s.get("active", True)))
        else:
            raise SystemExit(f"serve.py: deployment {spec['name']}: unsupported schedule {s}")
    limit = spec.get("concurrency_limit")
    if isinstance(limit, dict):
        limit = ConcurrencyLimitConfig(**limit)
    from prefect.events import DeploymentTriggerTypes
    from pydantic import TypeAdapter

    triggers = TypeAdapter(list[DeploymentTriggerTypes]).validate_python(spec.get("triggers") or [])
    return flow.to_deployment(
        name=spec["name"], schedules=schedules or None, parameters=spec.get("parameters") or {},
        concurrency_limit=limit, description=spec.get("description"), tags=spec.get("tags"),
        triggers=triggers or None,
    )


def check_conflicts(deployments: list[Any], *, replace: bool) -> list[str]:
    """Deployments of the same name already registered for a work pool (by ``prefect deploy``).

    The server would keep their work pool and pull steps, and a worker would compete with this
    process for their runs: with ``replace`` they are deleted first (their past flow runs stay),
    otherwise their names are returned for an error message. A replaced deployment's automations
    are deleted with it (``serve`` creates them again for the new one).
    """
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    conflicts = []
    with get_client(sync_client=True) as client:
        for d in deployments:
            try:
                existing = client.read_deployment_by_name(f"{d.flow_name}/{d.name}")
            except ObjectNotFound:
                continue
            if existing.work_pool_name:
                if replace:
                    # its automations (prefect.yaml's triggers) go with it: the server keeps them,
                    # pointing at the deleted deployment ("Run deployment: No access"), and serve
                    # creates them again for the new one (they were doubled)
                    client.delete_resource_owned_automations(f"prefect.deployment.{existing.id}")
                    client.delete_deployment(existing.id)
                else:
                    conflicts.append(f"{d.flow_name}/{d.name} (work pool {existing.work_pool_name})")
    return conflicts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python deployments/serve.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workspace", help="workspace to index (default: $MEMORY_CORE_WORKSPACE)")
    ap.add_argument("--only", action="append", metavar="NAME", help="serve only this deployment (repeatable)")
    ap.add_argument("--limit", type=int, default=4, help="flow runs at once on this machine (default 4)")
    ap.add_argument("--replace", action="store_true",
                    help="delete deployments of the same names that `prefect deploy` registered for a work pool")
    args = ap.parse_args(argv)
    if args.workspace:
        os.environ["MEMORY_CORE_WORKSPACE"] = str(Path(args.workspace).expanduser().resolve())
    if not os.environ.get("MEMORY_CORE_WORKSPACE"):
        print("serve.py: set MEMORY_CORE_WORKSPACE or pass --workspace", file=sys.stderr)
        return 2
    # Entrypoints in prefect.yaml are relative to the repository root, and the flows import
    # `flows`, `tasks` and `memory_core` from it.
    os.chdir(ROOT)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from prefect import serve

    for name in unset_placeholders(only=args.only):
        print(f"serve.py: warning: {name} is not set: the parameters that name it are left empty; runs read"
              f" ${name} from their own environment, or fail saying it is missing", file=sys.stderr)
    deployments = [to_deployment(s) for s in load_specs(only=args.only)]
    conflicts = check_conflicts(deployments, replace=args.replace)
    if conflicts:
        print("serve.py: already deployed to a work pool: " + ", ".join(conflicts) + ". A worker would compete"
              " with this process for their runs. Stop the worker and rerun with --replace (their past runs"
              " are kept), or keep using the worker.", file=sys.stderr)
        return 2
    serve(*deployments, limit=args.limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
