#!/usr/bin/env bash
# Install qmd (npm @tobilu/qmd) and the Bun runtime it runs on (npm `bun`) into one folder,
# and print the path of the qmd command to put in the config (`[qmd] command = "..."`).
#
#   scripts/install-qmd.sh [PREFIX]     default PREFIX: ~/.local/share/memory-core/qmd-tools
#
# Idempotent: an existing install of the pinned versions is reused. Needs node + npm.
# Exit codes: 0 ok (path on stdout), 3 npm missing, 1 install failed. Progress goes to stderr.
set -euo pipefail

QMD_VERSION="${QMD_VERSION:-0.9.0}"
BUN_VERSION="${BUN_VERSION:-1.4.5}"
prefix="${1:-${MEMORY_CORE_QMD_PREFIX:-$HOME/.local/share/memory-core/qmd-tools}}"
mkdir -p "$prefix"
prefix="$(cd "$prefix" && pwd)"
bin="$prefix/node_modules/.bin"

installed_version() {
  node -e "try{process.stdout.write(require('$prefix/node_modules/$1/package.json').version)}catch(e){}" 2>/dev/null || true
}

if [[ -x "$bin/qmd" && "$(installed_version @tobilu/qmd)" == "$QMD_VERSION" && "$(installed_version bun)" == "$BUN_VERSION" ]] \
   && "$bin/bun" --version >/dev/null 2>&1; then
  echo "$bin/qmd"
  exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
  echo "install-qmd: npm is not installed (qmd is an npm package; install Node.js and npm first)" >&2
  exit 3
fi

echo "install-qmd: installing @tobilu/qmd@$QMD_VERSION and bun@$BUN_VERSION into $prefix" >&2
# No lifecycle scripts: bun's binary ships in its platform package, and node-llama-cpp's
# postinstall would fetch llama.cpp builds (qmd loads them only for embed/vsearch/query).
npm install --prefix "$prefix" --no-audit --no-fund --ignore-scripts \
  "@tobilu/qmd@$QMD_VERSION" "bun@$BUN_VERSION" >&2

if ! "$bin/bun" --version >/dev/null 2>&1; then
  # older npm layouts: let bun's own installer link the platform binary
  (cd "$prefix/node_modules/bun" && node install.js) >&2 || true
fi
if ! "$bin/bun" --version >/dev/null 2>&1; then
  echo "install-qmd: bun does not run from $bin/bun" >&2
  exit 1
fi
if ! PATH="$bin:$PATH" "$bin/qmd" --help >/dev/null 2>&1; then
  echo "install-qmd: qmd does not start ($bin/qmd --help failed)" >&2
  exit 1
fi
echo "$bin/qmd"
