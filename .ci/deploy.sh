#!/usr/bin/env bash
# The deployment artifacts, exercised as far as this machine allows (contract §17):
#
# - The Containerfile's runtime image is built offline with podman from the binary cargo built
#   (its files handed over as the `build` stage: the only base left is `scratch`), and its file
#   system exported. The binary is
#   then started from that tree as a container would start it: the image's entrypoint, command,
#   variables, working directory and user, the root file system read-only but for a copy of the
#   image's data directory (a volume), with /proc and a minimal /dev. It must answer /readyz
#   with 200, pass its own health check (`workbench probe`), answer /readyz with 503 once sent
#   SIGTERM, exit 0, and leave its files in the volume. Containers cannot run here; chroot is
#   as close as it gets.
# - deploy/workbench.service passes `systemd-analyze verify`, and `systemd-analyze security`
#   rates it 1.5 or better.
#
# Usage: .ci/deploy.sh [BINARY]   (default: the debug binary `make test` built)
# Needs root, podman and systemd (.ci/run installs them).
set -euo pipefail
cd "$(dirname "$0")/.."

binary=${1:-${CARGO_TARGET_DIR:-target}/debug/workbench}
fail() {
  echo "deploy: FAILED: $*" >&2
  exit 1
}
[ -x "$binary" ] || fail "$binary is not built (make test, or cargo build -p server)"
[ "$(id -u)" = 0 ] || fail "needs root (mounts in a namespace of its own, chroot)"
for tool in podman systemd-analyze unshare curl; do
  command -v "$tool" >/dev/null || fail "$tool is not installed"
done

work=$(mktemp -d /tmp/workbench-deploy.XXXXXX)
# A podman store of its own, in the temporary folder: nothing is left in the machine's.
podman=(podman --root "$work/storage" --runroot "$work/run" --storage-driver vfs
  --cgroup-manager cgroupfs --events-backend file)
image=localhost/workbench:ci
container=
server=
cleanup() {
  if [ -n "$server" ] && kill -0 "$server" 2>/dev/null; then
    kill -KILL "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  if [ -n "$container" ]; then
    "${podman[@]}" rm --force --volumes "$container" >/dev/null 2>&1 || true
  fi
  "${podman[@]}" rmi --force "$image" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

started=$(date +%s)
echo "== image: build from $binary (offline, FROM scratch)"
deploy/image-context.sh "$binary" "$work/context"
"${podman[@]}" build --quiet --build-context "build=$work/context" -t "$image" \
  -f Containerfile "$work/context" >"$work/build.log" 2>&1 || { cat "$work/build.log" >&2; fail "podman build"; }

echo "== image: export its file system"
container=$("${podman[@]}" create "$image")
mkdir "$work/tree"
"${podman[@]}" export "$container" | tar -x --numeric-owner -p -C "$work/tree"
tree=$work/tree

# Nothing but the binary, its libraries, CA certificates, passwd, group and nsswitch.conf.
unexpected=$(find "$tree" ! -type d -printf '%P\n' | grep -v -E \
  -e '^usr/local/bin/workbench$' \
  -e '^(usr/)?lib(64|32|x32)?/.+\.so(\.[0-9]+)*$' \
  -e '^etc/(passwd|group|nsswitch\.conf|ssl/certs/ca-certificates\.crt)$' || true)
[ -z "$unexpected" ] || fail "the image holds more than the binary needs:
$unexpected"

inspect() { "${podman[@]}" image inspect --format "$1" "$image"; }
user=$(inspect '{{.Config.User}}')
workdir=$(inspect '{{.Config.WorkingDir}}')
mapfile -t entrypoint < <(inspect '{{range .Config.Entrypoint}}{{println .}}{{end}}' | sed '/^$/d')
mapfile -t command < <(inspect '{{range .Config.Cmd}}{{println .}}{{end}}' | sed '/^$/d')
mapfile -t variables < <(inspect '{{range .Config.Env}}{{println .}}{{end}}' | sed '/^$/d')
mapfile -t volumes < <(inspect '{{range $path, $_ := .Config.Volumes}}{{println $path}}{{end}}' | sed '/^$/d')
uid=${user%%:*}
gid=${user#*:}
[[ "$uid" =~ ^[0-9]+$ && "$uid" != 0 && "$gid" =~ ^[0-9]+$ ]] ||
  fail "the image's user is \`$user\`: a numeric uid:gid, not root"
[ "${command[*]}" = serve ] || fail "the image's command is \`${command[*]}\`, not serve"
[ "${#volumes[@]}" = 1 ] || fail "the image has ${#volumes[@]} volumes, one expected"
volume=${volumes[0]}
[ "$(stat -c %u "$tree$volume")" = "$uid" ] || fail "$volume is not owned by the image's user"

# The volume starts as a copy of the image's directory, as a container runtime makes it.
cp -a "$tree$volume" "$work/volume"
mkdir -p "$tree/proc" "$tree/dev"

# Sets `in_image` to the command that runs ARGS from the tree as the container would, with
# the image's variables and then the NAME=value pairs given before `--`. The mounts exist only
# in a mount namespace of its own; every step execs the next, so the command's process is the
# binary's.
in_image() {
  local extra=()
  while [ "$1" != -- ]; do
    extra+=("$1")
    shift
  done
  shift
  local run=(env -i "${variables[@]}" "${extra[@]}" "$(command -v unshare)" --root="$tree"
    --wd="$workdir" --setuid="$uid" --setgid="$gid" -- "$@")
  in_image=(unshare --mount --propagation private -- bash -euc '
    tree=$1 volume=$2 data=$3
    shift 3
    mount --bind "$tree" "$tree"
    mount -o remount,bind,ro "$tree"
    mount --bind "$data" "$tree$volume"
    mount -t proc proc "$tree/proc"
    mount -t tmpfs -o mode=0755,nosuid,noexec tmpfs "$tree/dev"
    for node in null:1:3 zero:1:5 random:1:8 urandom:1:9; do
      IFS=: read -r name major minor <<<"$node"
      mknod -m 0666 "$tree/dev/$name" c "$major" "$minor"
    done
    exec "$@"
  ' bash "$tree" "$volume" "$work/volume" "${run[@]}")
}

echo "== image: serve from the exported tree as uid $uid, root read-only, SQLite in $volume"
# A free port instead of the image's 8080: only the address changes.
in_image WORKBENCH_LISTEN=127.0.0.1:0 -- "${entrypoint[@]}" "${command[@]}"
"${in_image[@]}" >"$work/serve.out" 2>"$work/serve.log" &
server=$!
address=
ready=
for _ in $(seq 1 600); do
  if ! kill -0 "$server" 2>/dev/null; then
    cat "$work/serve.log" >&2
    fail "the binary exited before it was ready"
  fi
  if [ -z "$address" ]; then
    address=$(grep -o -m1 'listening on http://[0-9.:]*' "$work/serve.log" | sed 's|.*http://||' || true)
  elif [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$address/readyz")" = 200 ]; then
    ready=yes
    break
  fi
  sleep 0.1
done
[ -n "$ready" ] || { cat "$work/serve.log" >&2; fail "/readyz never answered 200"; }
[ "$(stat -c %u "/proc/$server")" = "$uid" ] || fail "the server does not run as uid $uid"
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$address/healthz")" = 200 ] ||
  fail "/healthz did not answer 200"
echo "   ready at http://$address after $(($(date +%s) - started)) s since the build began"

echo "== image: its health check (workbench probe) from the tree"
in_image "WORKBENCH_LISTEN=$address" -- "${entrypoint[@]}" probe /readyz
"${in_image[@]}" >"$work/probe.out" 2>&1 ||
  { cat "$work/probe.out" >&2; fail "workbench probe /readyz failed on a ready server"; }

echo "== image: SIGTERM: /readyz answers 503 while it drains, then it exits 0"
kill -TERM "$server"
draining=
for _ in $(seq 1 20); do
  if [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$address/readyz")" = 503 ]; then
    draining=yes
    break
  fi
  sleep 0.05
done
[ -n "$draining" ] || { cat "$work/serve.log" >&2; fail "/readyz did not answer 503 after SIGTERM"; }
status=0
for _ in $(seq 1 600); do
  kill -0 "$server" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$server" 2>/dev/null; then
  cat "$work/serve.log" >&2
  fail "still running 60 s after SIGTERM"
fi
wait "$server" || status=$?
server=
[ "$status" = 0 ] || { cat "$work/serve.log" >&2; fail "exit $status after SIGTERM"; }
for file in workbench.db secret.key bootstrap-credentials.json; do
  [ "$(stat -c %u "$work/volume/$file" 2>/dev/null)" = "$uid" ] ||
    fail "$file was not written into the volume by uid $uid"
done

echo "== systemd unit: verify and rate deploy/workbench.service"
# `verify` wants the unit's binary at its path: the image's, in a mount namespace of its own.
unshare --mount --propagation private -- bash -euc '
  mount --bind "$1/usr/local/bin" /usr/local/bin
  systemd-analyze verify deploy/workbench.service
  systemd-analyze security --offline=true --threshold=15 deploy/workbench.service >"$2" 2>&1 ||
    { cat "$2" >&2; echo "deploy: the unit is rated worse than 1.5" >&2; exit 1; }
  tail -n 1 "$2"
' bash "$tree" "$work/security.txt" || fail "systemd-analyze"

echo "== deployment artifacts checked in $(($(date +%s) - started)) s"
