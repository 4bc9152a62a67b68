#!/usr/bin/env bash
# `make clients`: clients generated from /openapi.json of the binary, and a first user's journey
# through each (clients/python/journey.py, clients/typescript/journey.ts), on a fresh SQLite
# data directory. The generators run with warnings as errors: openapi-python-client must print
# no warning and drop nothing; openapi-typescript must print none, and the journey must build
# under `strict`. The generated code is an output (under target/clients), never committed.
# Generators are pinned: PyPI into a virtual environment, npm from clients/typescript's lock.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON_CLIENT_VERSION=0.29.1
target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
work=$target/clients
venv=$work/venv
mkdir -p "$work"

if ! "$venv/bin/openapi-python-client" --version 2>/dev/null | grep -q "$PYTHON_CLIENT_VERSION"; then
  echo "== installing openapi-python-client $PYTHON_CLIENT_VERSION into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    "openapi-python-client==$PYTHON_CLIENT_VERSION" ruff
fi

bin=${CLIENTS_BINARY:-}
if [ -z "$bin" ]; then
  cargo build --quiet -p server --bin workbench
  bin=$target/debug/workbench
fi

run=$(mktemp -d "$work/run.XXXXXX")
# shellcheck source=.ci/fresh-server.sh
. .ci/fresh-server.sh
fresh_server "$bin" "$run" "Client journeys"
curl -fs "$base/openapi.json" -o "$run/openapi.json"
export WB_BASE=$base WB_ENV=$env_id WB_SECRET=$secret

echo "== openapi-python-client: generating"
generated=$run/python
PATH=$venv/bin:$PATH openapi-python-client generate --path "$run/openapi.json" \
  --output-path "$generated" --config clients/python/config.yaml --overwrite \
  >"$run/python-generate.log" 2>&1 || { cat "$run/python-generate.log"; exit 1; }
cat "$run/python-generate.log"
if grep -qiE "warning|error|skipp" "$run/python-generate.log"; then
  echo "openapi-python-client warned: the document must generate cleanly" >&2
  exit 1
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check "$generated"
echo "== the Python journey"
"$venv/bin/python" clients/python/journey.py

echo "== openapi-typescript: generating"
(
  cd clients/typescript
  npm ci --silent --no-audit --no-fund
  mkdir -p generated
  WB_OPENAPI="$run/openapi.json" npm run --silent generate >"$run/ts-generate.log" 2>&1 \
    || { cat "$run/ts-generate.log"; exit 1; }
  cat "$run/ts-generate.log"
  if grep -qiE "warn|error" "$run/ts-generate.log"; then
    echo "openapi-typescript warned: the document must generate cleanly" >&2
    exit 1
  fi
  npm run --silent build
  echo "== the TypeScript journey"
  npm run --silent journey
)
if grep -q '"level":"ERROR"' "$run/server.log"; then
  echo "the server logged errors:" >&2
  grep '"level":"ERROR"' "$run/server.log" | head -20 >&2
  exit 1
fi
