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
# shellcheck source=.ci/fresh-server.sh
. .ci/fresh-server.sh
fresh_server "$bin" "$run" "API fuzz"

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
