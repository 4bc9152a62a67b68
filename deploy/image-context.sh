#!/bin/sh
# Lays out the build context of the Containerfile's runtime stage in DIR from a built binary:
# DIR/data, an empty directory (the image makes its data directory /var/lib/workbench from it,
# owned by uid 10001), and DIR/rootfs, the image's root filesystem:
#   /usr/local/bin/workbench          the binary
#   the shared libraries it loads     as ldd lists them (the dynamic loader included), each at
#                                     the path ldd found it at, so the loader finds them there
#   /etc/ssl/certs/ca-certificates.crt  CA certificates (TLS to PostgreSQL, webhooks, push)
#   /etc/passwd, /etc/group           the user the image runs as (uid and gid 10001)
#   /etc/nsswitch.conf                names are looked up in /etc/hosts, then DNS
#
# The Containerfile's build stage runs it, and so does CI (.ci/deploy.sh) on the binary cargo
# built: both images are made the same way. Usage: deploy/image-context.sh BINARY DIR
set -eu

if [ $# -ne 2 ]; then
  echo "usage: $0 BINARY DIR" >&2
  exit 2
fi
binary=$1
dest=$2/rootfs
uid=10001
certs=/etc/ssl/certs/ca-certificates.crt

[ -x "$binary" ] || { echo "$0: $binary is not an executable file" >&2; exit 1; }
[ -f "$certs" ] || { echo "$0: $certs is missing (install ca-certificates)" >&2; exit 1; }

# /var/lib exists, owned by root: the Containerfile adds /var/lib/workbench in it.
mkdir -p "$2/data" "$dest/usr/local/bin" "$dest/etc/ssl/certs" "$dest/var/lib"
cp "$binary" "$dest/usr/local/bin/workbench"
chmod 0755 "$dest/usr/local/bin/workbench"

# ldd prints "name => /path (address)" for each library, and "/path (address)" for the
# loader; the kernel's vDSO has no path. A library it cannot find stops the build here rather
# than at the image's first start. A statically linked binary needs none.
if libraries=$(ldd "$binary" 2>&1); then
  if printf '%s\n' "$libraries" | grep -q 'not found'; then
    printf '%s: a library of %s is missing:\n%s\n' "$0" "$binary" "$libraries" >&2
    exit 1
  fi
  printf '%s\n' "$libraries" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' |
    sort -u |
    while read -r library; do
      mkdir -p "$dest$(dirname "$library")"
      cp -L "$library" "$dest$library"
    done
elif ! printf '%s\n' "$libraries" | grep -q -e 'not a dynamic executable' -e 'statically linked'; then
  printf '%s: ldd %s failed:\n%s\n' "$0" "$binary" "$libraries" >&2
  exit 1
fi

cp -L "$certs" "$dest$certs"
echo "workbench:x:$uid:$uid:workbench:/var/lib/workbench:/sbin/nologin" >"$dest/etc/passwd"
echo "workbench:x:$uid:" >"$dest/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$dest/etc/nsswitch.conf"
chmod 0644 "$dest/etc/passwd" "$dest/etc/group" "$dest/etc/nsswitch.conf" "$dest$certs"
