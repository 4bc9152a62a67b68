#!/usr/bin/env bash
# `make sdk`: the browser SDK (sdks/web) from its lock (typescript, esbuild: npm registry
# packages): its type check, its build and its unit tests under `node --test`. The built bundle
# is committed (the service embeds it for /console/sdk-example/): the build must give the same
# bytes, or the committed bundle is stale.
set -euo pipefail
cd "$(dirname "$0")/../sdks/web"

committed=$(mktemp)
trap 'rm -f "$committed"' EXIT
cp dist/workbench.js "$committed"
npm ci --silent --no-audit --no-fund
npm run --silent check
if ! cmp -s "$committed" dist/workbench.js; then
  echo "sdks/web/dist/workbench.js is not what its sources build: run make sdk and commit it" >&2
  exit 1
fi
