# Sourced by the installers that take Python from Ubuntu's archive (set ARCHIVE and work
# first). `ubuntu_index SUITE PATH` prints dists/SUITE/PATH decompressed, checked against the
# SHA-256 of SUITE's Release, whose InRelease signature archive.py verifies against Ubuntu's
# archive keyring. The keyring is Debian's ubuntu-keyring package, fetched by fetch_debian.py
# through Debian's signed archive, itself verified against the machine's Debian keyring: what
# the installers take from Ubuntu is checked, file by file, back to a key the machine trusts.
# Returns 75 when the archive or the suite cannot be had, 1 when a check fails.

ubuntu_index() {
  local suite="$1" path="$2" here keyring sum
  here="$(dirname "${BASH_SOURCE[0]}")"
  keyring="$work/ubuntu-keyring/tree/usr/share/keyrings/ubuntu-archive-keyring.gpg"
  if [ ! -f "$keyring" ]; then
    DEBIAN_SUITE=stable python3 "$here/fetch_debian.py" "$work/ubuntu-keyring" ubuntu-keyring \
      >&2 || return $?
  fi
  if [ ! -f "$work/$suite.Release" ]; then  # kept only once verified
    python3 "$here/archive.py" release "$ARCHIVE" "$suite" "$keyring" \
      > "$work/$suite.Release.part" || return $?
    mv "$work/$suite.Release.part" "$work/$suite.Release"
  fi
  sum="$(python3 "$here/archive.py" sha256 "$work/$suite.Release" "$path")" || return $?
  curl -fsS -m 300 -o "$work/index.xz" "$ARCHIVE/dists/$suite/$path" || return 75
  echo "$sum  $work/index.xz" | sha256sum --strict -c --quiet - \
    || { echo "$suite/$path does not match its signed Release" >&2; return 1; }
  xz -dc "$work/index.xz"
}
