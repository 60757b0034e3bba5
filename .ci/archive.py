"""What the CI installers take from the Debian and Ubuntu archives, checked back to a key.

    python3 archive.py release MIRROR SUITE KEYRING > Release
    python3 archive.py sha256 Release PATH

print SUITE's Release text once its InRelease is verified, and the SHA-256 that text gives for
PATH (main/binary-amd64/Packages.xz, say), for the shell installers (ubuntu-archive.sh);
fetch_debian.py imports the same functions.

An InRelease is accepted when gpgv finds a good signature by a key of KEYRING and no bad one
(a signature by a key the keyring lacks, such as an archive key newer than the machine's
keyring, is passed over, as apt does), and when it names SUITE as its Suite or Codename (a
genuinely signed Release of another suite, an older one say, is refused). Only the text the
signature covers is used: gpgv accepts a clearsigned file with unsigned text around it, so
nothing is ever read from the downloaded file itself. Valid-Until is not checked: the mirror
this CI reaches serves snapshots whose Release files are past it.

Exit status 75 when the archive, the suite or a package cannot be had (the installers then
skip, saying why); 1 when anything fails verification."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

UNAVAILABLE = 75
# status lines that make a signed file unacceptable whatever else it carries
_REFUSED = ("BADSIG", "REVKEYSIG", "ERROR", "FAILURE")
_MISSING_KEY = "9"  # ERRSIG's return code (its 6th argument) for a key the keyring lacks


class Unavailable(Exception):
    """The archive, a suite or a package is not there (not a verification failure)."""


def get(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=300) as response:
            return response.read()
    except urllib.error.HTTPError as exc:
        if exc.code in (404, 410):
            raise Unavailable(f"{url}: {exc.code}, not on the mirror") from exc
        raise
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        raise Unavailable(f"{url}: {exc}") from exc


def verified_release(mirror: str, suite: str, keyring: str) -> str:
    """SUITE's Release text, as far as a good signature by KEYRING covers it."""
    signed = get(f"{mirror}/dists/{suite}/InRelease")
    with tempfile.TemporaryDirectory() as tmp:
        source, output = Path(tmp, "InRelease"), Path(tmp, "Release")
        source.write_bytes(signed)
        status = subprocess.run(
            ["gpgv", "--status-fd", "1", "--keyring", keyring, "--output", str(output), source],
            capture_output=True,
            text=True,
        )
        fields = [
            line.split() for line in status.stdout.splitlines() if line.startswith("[GNUPG:]")
        ]
        good = any(f[1] == "VALIDSIG" for f in fields if len(f) > 1)
        refused = [
            " ".join(f[1:])
            for f in fields
            if len(f) > 1 and (f[1] in _REFUSED or (f[1] == "ERRSIG" and f[7:8] != [_MISSING_KEY]))
        ]
        if not good or refused:
            sys.exit(
                f"{mirror}/dists/{suite}/InRelease: no good signature by {keyring}"
                f"{' (' + '; '.join(refused) + ')' if refused else ''}\n{status.stderr}"
            )
        release = output.read_text()
    names = set(re.findall(r"^(?:Suite|Codename): (\S+)$", release, re.M))
    if suite not in names:
        sys.exit(f"{mirror}/dists/{suite}/InRelease is signed for {sorted(names)}, not {suite}")
    return release


def sha256_of(release: str, path: str) -> str:
    """The SHA-256 the Release text gives for PATH (relative to the suite's directory)."""
    section = release.split("\nSHA256:\n", 1)[-1] if "\nSHA256:\n" in release else ""
    for line in section.splitlines():
        if not line.startswith(" "):
            break
        digest, _size, name = line.split()
        if name == path:
            return digest
    sys.exit(f"{path} is not in the signed Release")


def main() -> None:
    command, *args = sys.argv[1:]
    if command == "sha256":
        release, path = args
        print(sha256_of(Path(release).read_text(), path))
        return
    if command != "release":
        sys.exit(f"unknown command {command}")
    try:
        sys.stdout.write(verified_release(*args))
    except Unavailable as exc:
        print(exc, file=sys.stderr)
        sys.exit(UNAVAILABLE)


if __name__ == "__main__":
    main()
