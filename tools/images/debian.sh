# The tools image's Debian root (sourced by build.sh and lock-debian.sh): mmdebstrap from the apt sources this
# machine uses, essential packages and python3 only, no documentation, no apt sources left in it. The byte code
# that Debian's python3 compiles on installation embeds timestamps: it is replaced by hash-based byte code,
# compiled with a fixed hash seed so that set constants come out in the same order every time.

DEBIAN_SUITE=bookworm
DEBIAN_LOCK=tools/images/tools-debian.lock
# What the image needs beyond the Essential set; usr-is-merged stands in for usrmerge, which would pull in perl.
DEBIAN_WANTED=python3,usr-is-merged
# Brought in by mmdebstrap's merged-/usr set-up, needed by nothing once /usr is merged.
DEBIAN_UNWANTED="usrmerge perl libperl5.36 perl-modules-5.36 libfile-find-rule-perl libnumber-compare-perl libtext-glob-perl"

# The bookworm entries of /etc/apt/sources.list*: the only mirror known to be reachable from here.
debian_sources() {
  local found
  found=$(grep -l -s "$DEBIAN_SUITE" /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
          /etc/apt/sources.list.d/*.sources | sort)
  [ -n "$found" ] || die "no $DEBIAN_SUITE entry in /etc/apt/sources.list*: add one (a Debian mirror you can reach)"
  echo "$found"
}

# mmdebstrap into OUT.tar, installing PACKAGES (a comma-separated list, versions pinned or not).
debian_root() {  # PACKAGES OUT.tar
  local sources
  mapfile -t sources < <(debian_sources)
  mmdebstrap --quiet --variant=essential --include="$1" --skip=output/dev \
    --aptopt='Acquire::Check-Valid-Until "false"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook="chroot \"\$1\" dpkg --purge $DEBIAN_UNWANTED" \
    --customize-hook='rm -rf "$1"/etc/apt/sources.list "$1"/etc/apt/sources.list.d/*' \
    --customize-hook='find "$1/usr" -name __pycache__ -prune -exec rm -rf {} +' \
    --customize-hook='chroot "$1" env PYTHONHASHSEED=0 python3 -m compileall -q -j1 \
                        --invalidation-mode unchecked-hash /usr/lib/python3 /usr/lib/python3.11' \
    "$DEBIAN_SUITE" "$2" "${sources[@]}" >&2
}

# The packages of a root tar as name=version lines.
debian_packages() {  # ROOT.tar
  tar -xOf "$1" ./var/lib/dpkg/status |
    awk '/^Package:/ {p = $2} /^Version:/ {print p "=" $2}' | LC_ALL=C sort
}
