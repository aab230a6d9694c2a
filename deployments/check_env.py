"""Deploy-time check of the environment ``prefect deploy`` fills ``prefect.yaml``'s placeholders from.

Run by the deployments' ``build`` step (``prefect.deployments.steps.run_shell_script``)::

    python3 deployments/check_env.py WHICH VARIABLE [VARIABLE ...]   # WHICH: "the fleet deployment"

``prefect deploy --all`` fills ``{{ $VAR }}`` with nothing, without a word, when ``VAR`` is not
set: the fleet deployment got an empty ``config_file``, the index deployments an empty
``workspace``. This prints one warning per unset variable, naming the deployment and what it will
do instead, on stderr (``prefect deploy`` shows it), and exits 0: a deployment whose worker sets
the variable still works, so the deploy is not stopped. Standard library only: any ``python3``
on the PATH runs it.
"""

from __future__ import annotations

import os
import sys

WHAT = {
    "MEMORY_CORE_CONFIG": ("config_file", "each run reads $MEMORY_CORE_CONFIG from the worker's environment, and fails"
                           " with 'no config file names agents' when the worker does not set it either"),
    "MEMORY_CORE_WORKSPACE": ("workspace", "each run reads the workspace from the worker's environment or config"
                              " file, and fails when neither names one"),
}


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: check_env.py WHICH VARIABLE [VARIABLE ...]", file=sys.stderr)
        return 2
    deployment, names = argv[0], argv[1:]
    for name in names:
        if os.environ.get(name, "").strip():
            continue
        param, instead = WHAT.get(name, (name.lower(), "the parameter is empty"))
        print(f"memory-core: warning: ${name} is not set: {deployment} gets an empty {param}"
              f" parameter; {instead}. Export it and deploy again, or set the parameter on the deployment"
              " (docs/deployments.md).", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
