#!/usr/bin/env bash
# `make api-fuzz`: schemathesis against /openapi.json of the release binary, on a fresh SQLite
# data directory, with a key holding every scope and real ids for the environment, a flow, a
# user, a card and a segment (so that cases reach the logic behind the 404s). Every check, every
# phase (every check is on unless the run's configuration switches one off for named
# operations: `--checks all` would override those exceptions); the run must report no failure. Schemathesis is installed from PyPI, pinned, into a
# virtual environment under target/api-fuzz.
#
# API_FUZZ_EXAMPLES (default 50) and API_FUZZ_WORKERS (default 2) tune the run.
set -euo pipefail
cd "$(dirname "$0")/.."

SCHEMATHESIS_VERSION=4.32.5
examples=${API_FUZZ_EXAMPLES:-50}
workers=${API_FUZZ_WORKERS:-2}
target=${CARGO_TARGET_DIR:-$PWD/target}
work=$target/api-fuzz
venv=$work/venv

if ! "$venv/bin/schemathesis" --version 2>/dev/null | grep -q "$SCHEMATHESIS_VERSION"; then
  echo "== installing schemathesis $SCHEMATHESIS_VERSION into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi

bin=${API_FUZZ_BINARY:-}
if [ -z "$bin" ]; then
  echo "== building the release binary"
  cargo build --release --quiet -p server --bin workbench
  bin=$target/release/workbench
fi

run=$(mktemp -d "$work/run.XXXXXX")
export WORKBENCH_DATABASE_URL="sqlite://$run/workbench.db"
export WORKBENCH_DATA_DIR=$run
port=$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export WORKBENCH_LISTEN=127.0.0.1:$port
# The run sends thousands of requests with one key: no rate limit.
export WORKBENCH_RATE_LIMIT_KEY=off
export WORKBENCH_RATE_LIMIT_TOKEN=off
export WORKBENCH_LOG=warn
export WORKBENCH_LOG_FORMAT=json
export WORKBENCH_MIN_FREE_DISK=0

"$bin" env create --name "API fuzz" >"$run/env.json"
env_id=$("$venv/bin/python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["environmentId"])' "$run/env.json")
scopes=()
mapfile -t SCOPES_ALL < <("$venv/bin/python" .ci/api-fuzz-setup.py --scopes)
for scope in "${SCOPES_ALL[@]}"; do scopes+=(--scope "$scope"); done
"$bin" key create --env "$env_id" --name "API fuzz" "${scopes[@]}" >"$run/key.json"
secret=$("$venv/bin/python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["clientSecret"])' "$run/key.json")
held=$("$venv/bin/python" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["scopes"]))' "$run/key.json")
if [ "$held" != "${#SCOPES_ALL[@]}" ]; then
  echo "the key holds $held scopes, not every one (${#SCOPES_ALL[@]})" >&2
  exit 1
fi

"$bin" serve >"$run/server.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
base=http://127.0.0.1:$port
# The server is on loopback: never through a proxy the machine may set (curl, urllib, schemathesis).
export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost
# A debug binary on a loaded machine may take seconds to open its database: up to two minutes.
# `/readyz`, not `/healthz`: while the process starts, `/healthz` answers 200 at once and every
# other path 503 `not_ready` (contract §17), which a setup call made then would get.
started=$(date +%s)
until curl -fs --max-time 5 "$base/readyz" >/dev/null 2>&1; do
  if ! kill -0 "$server" 2>/dev/null || [ $(($(date +%s) - started)) -ge 120 ]; then
    echo "the server was not ready ($base/readyz) within $(($(date +%s) - started)) s:" >&2
    if kill -0 "$server" 2>/dev/null; then
      echo "it is still running; its state:" >&2
      grep -E '^(State|Threads|VmRSS)' "/proc/$server/status" >&2 || true
      for task in /proc/"$server"/task/*; do
        echo "  thread $(cat "$task/comm" 2>/dev/null) waits in $(cat "$task/wchan" 2>/dev/null)" >&2
      done
      if command -v ss >/dev/null; then
        ss -ltnp 2>/dev/null | grep -F ":$port " >&2 || echo "nothing listens on port $port" >&2
      fi
    else
      wait "$server" && code=0 || code=$?
      echo "it exited with status $code" >&2
    fi
    df -h "$run" >&2 || true
    free -m >&2 || true
    echo "its log:" >&2
    cat "$run/server.log" >&2
    exit 1
  fi
  sleep 0.1
done
echo "== the server was ready after $(($(date +%s) - started)) s"

echo "== setting up fixed ids at $base"
WB_BASE=$base WB_ENV=$env_id WB_SECRET=$secret WB_STATEFUL_CONFIG=$run/stateful.toml \
  "$venv/bin/python" .ci/api-fuzz-setup.py >"$run/schemathesis.toml"
cat "$run/schemathesis.toml"

# The stateful phase apart, with its own configuration (.ci/api-fuzz-setup.py says why).
start=$(date +%s)
status=0
for phases in examples,coverage,fuzzing stateful; do
  config=$run/schemathesis.toml
  mode=all
  if [ "$phases" = stateful ]; then
    config=$run/stateful.toml
    # Valid data only: a stateful step generated invalid goes out labelled valid when it
    # cannot be discarded, and a path with a control character is then "valid data refused".
    # The other phases send the invalid data.
    mode=positive
  fi
  echo "== schemathesis: every check, phases $phases, $examples examples per operation"
  # Hypothesis reads the source of its lambdas with Python's `ast`, whose recursion check is
  # not thread-safe: with two workers it can fail on its own ("AST constructor recursion depth
  # mismatch"), a fault of the fuzzer, not of the service. Such a run, and only such a run
  # (no failure reported), is run once more.
  for attempt in 1 2; do
    phase_status=0
    (cd "$run" && "$venv/bin/schemathesis" --config-file "$config" run "$base/openapi.json" \
      --phases "$phases" --mode "$mode" \
      --max-examples "$examples" --workers "$workers" --seed 1 \
      --generation-database none \
      -H "Authorization: Bearer $secret" \
      --report junit --report-dir "$run/report-$phases" \
      --no-color) >"$run/phase-$phases.log" 2>&1 || phase_status=$?
    cat "$run/phase-$phases.log"
    if [ "$phase_status" -ne 0 ] && [ "$attempt" = 1 ] \
      && grep -q "AST constructor recursion depth mismatch" "$run/phase-$phases.log" \
      && ! grep -q "^Failures:" "$run/phase-$phases.log"; then
      echo "== schemathesis failed inside Python's ast (not the service): running the phase again"
      continue
    fi
    break
  done
  [ "$phase_status" -eq 0 ] || status=$phase_status
done
echo "== schemathesis took $(( $(date +%s) - start )) s (report and server log in $run)"
if grep -q '"level":"ERROR"' "$run/server.log"; then
  echo "the server logged errors:" >&2
  grep '"level":"ERROR"' "$run/server.log" | head -20 >&2
  status=1
fi
exit $status
