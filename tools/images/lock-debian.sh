#!/usr/bin/env bash
# Pins every Debian package of the tools image (tools/images/tools-debian.lock) to what the mirror serves today.
# Run it when a pinned version has left the mirror (build.sh says so), then commit the lock.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tools/images/lib.sh
. tools/images/debian.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
debian_root "$DEBIAN_WANTED" "$work/root.tar"
{
  echo "# Debian $DEBIAN_SUITE packages of the tools image's root, amd64; written by tools/images/lock-debian.sh."
  debian_packages "$work/root.tar"
} > "$DEBIAN_LOCK"
log "wrote $DEBIAN_LOCK ($(grep -vc '^#' "$DEBIAN_LOCK") packages)"
