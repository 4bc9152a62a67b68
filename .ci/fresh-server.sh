# Sourced by .ci/api-fuzz.sh and .ci/clients.sh: `fresh_server BIN DIR NAME` starts the
# `workbench` binary BIN on a fresh SQLite database in DIR, on a free port of loopback, with an
# environment NAME and a key holding every scope, and waits until it is ready (up to two
# minutes: a debug binary on a loaded machine may take seconds to open its database). It sets
# `base`, `env_id`, `secret` and `server` (the pid), and stops the server when the shell exits.
# Rate limits are off (the callers send many requests with one key) and the log is JSON at
# `warn`, in DIR/server.log.

fresh_server() {
  local bin=$1 run=$2 name=$3
  export WORKBENCH_DATABASE_URL="sqlite://$run/workbench.db"
  export WORKBENCH_DATA_DIR=$run
  local port
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  export WORKBENCH_LISTEN=127.0.0.1:$port
  export WORKBENCH_RATE_LIMIT_KEY=off
  export WORKBENCH_RATE_LIMIT_TOKEN=off
  export WORKBENCH_LOG=warn
  export WORKBENCH_LOG_FORMAT=json
  export WORKBENCH_MIN_FREE_DISK=0

  "$bin" env create --name "$name" >"$run/env.json"
  env_id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["environmentId"])' "$run/env.json")
  local scopes=() all=() scope held listed
  listed=$(python3 .ci/api-fuzz-setup.py --scopes)
  mapfile -t all <<<"$listed"
  if [ "${#all[@]}" -lt 2 ]; then
    echo "no scopes listed by .ci/api-fuzz-setup.py --scopes" >&2
    return 1
  fi
  for scope in "${all[@]}"; do scopes+=(--scope "$scope"); done
  "$bin" key create --env "$env_id" --name "$name" "${scopes[@]}" >"$run/key.json"
  secret=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["clientSecret"])' "$run/key.json")
  held=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["scopes"]))' "$run/key.json")
  if [ "$held" != "${#all[@]}" ]; then
    echo "the key holds $held scopes, not every one (${#all[@]})" >&2
    return 1
  fi

  "$bin" serve >"$run/server.log" 2>&1 &
  server=$!
  trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
  base=http://127.0.0.1:$port
  # The server is on loopback: never through a proxy the machine may set.
  export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost
  # `/readyz`, not `/healthz`: while the process starts, `/healthz` answers 200 at once and
  # every other path 503 `not_ready` (contract §17), which a setup call made then would get.
  local started
  started=$(date +%s)
  until curl -fs --max-time 5 "$base/readyz" >/dev/null 2>&1; do
    if ! kill -0 "$server" 2>/dev/null || [ $(($(date +%s) - started)) -ge 120 ]; then
      echo "the server was not ready ($base/readyz) within $(($(date +%s) - started)) s:" >&2
      if kill -0 "$server" 2>/dev/null; then
        echo "it is still running; its state:" >&2
        grep -E '^(State|Threads|VmRSS)' "/proc/$server/status" >&2 || true
        local task
        for task in /proc/"$server"/task/*; do
          echo "  thread $(cat "$task/comm" 2>/dev/null) waits in $(cat "$task/wchan" 2>/dev/null)" >&2
        done
        if command -v ss >/dev/null; then
          ss -ltnp 2>/dev/null | grep -F ":$port " >&2 || echo "nothing listens on port $port" >&2
        fi
      else
        local code
        wait "$server" && code=0 || code=$?
        echo "it exited with status $code" >&2
      fi
      df -h "$run" >&2 || true
      free -m >&2 || true
      echo "its log:" >&2
      cat "$run/server.log" >&2
      return 1
    fi
    sleep 0.1
  done
  echo "== the server was ready after $(($(date +%s) - started)) s"
}
