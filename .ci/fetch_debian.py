"""Fetch, from Debian's signed archive, packages and every golang-* package they depend on,
unpack them all under ROOT/tree and list their versions in ROOT/versions.txt (no apt, nothing
installed on the system).

    python3 fetch_debian.py ROOT PACKAGE...      (suite: $DEBIAN_SUITE, default testing)

Trust chain: InRelease is verified against the machine's Debian archive keyring
(archive.py), Packages.xz against the SHA-256 it gives, each .deb against Packages.
Exit status 75 when the archive or a package cannot be had, 1 when a check fails."""

import hashlib
import lzma
import os
import re
import subprocess
import sys

from archive import UNAVAILABLE, Unavailable, get, sha256_of, verified_release

MIRROR = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")
SUITE = os.environ.get("DEBIAN_SUITE", "testing")
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
INDEX = "main/binary-amd64/Packages.xz"


def index() -> dict[str, dict[str, str]]:
    """Every package of the suite's main/amd64 index by name, virtual names included."""
    digest = sha256_of(verified_release(MIRROR, SUITE, KEYRING), INDEX)
    packed = get(f"{MIRROR}/dists/{SUITE}/{INDEX}")
    if hashlib.sha256(packed).hexdigest() != digest:
        sys.exit(f"{INDEX} does not match the signed Release")
    packages: dict[str, dict[str, str]] = {}
    for paragraph in lzma.decompress(packed).decode().split("\n\n"):
        fields = dict(re.findall(r"^([\w-]+): (.*)$", paragraph, re.M))
        if "Package" in fields:
            packages[fields["Package"]] = fields
    for fields in list(packages.values()):
        for virtual in fields.get("Provides", "").split(","):
            if virtual.strip():
                packages.setdefault(virtual.split("(")[0].strip(), fields)
    return packages


def closure(packages: dict[str, dict[str, str]], wanted: list[str]) -> list[dict[str, str]]:
    """The wanted packages and, transitively, the golang-* packages they depend on (the first
    alternative the index has; versions are what the suite holds, which it keeps consistent)."""
    missing = [name for name in wanted if name not in packages]
    if missing:
        raise Unavailable(f"Debian {SUITE} has no {', '.join(missing)}")
    todo, chosen = list(wanted), {}
    while todo:
        fields = packages[todo.pop()]
        if fields["Package"] in chosen:
            continue
        chosen[fields["Package"]] = fields
        for dependency in fields.get("Depends", "").split(","):
            for alternative in dependency.split("|"):
                name = alternative.split("(")[0].split(":")[0].strip()
                if name in packages:
                    if name.startswith("golang-"):
                        todo.append(name)
                    break
    return list(chosen.values())


def main() -> None:
    root, *wanted = sys.argv[1:]
    os.makedirs(os.path.join(root, "debs"), exist_ok=True)
    try:
        chosen = closure(index(), wanted)
        for fields in chosen:
            deb = os.path.join(root, "debs", os.path.basename(fields["Filename"]))
            data = get(f"{MIRROR}/{fields['Filename']}")
            if hashlib.sha256(data).hexdigest() != fields["SHA256"]:
                sys.exit(f"{fields['Filename']} does not match the signed index")
            with open(deb, "wb") as out:
                out.write(data)
            subprocess.run(["dpkg-deb", "-x", deb, os.path.join(root, "tree")], check=True)
            os.remove(deb)
    except Unavailable as exc:
        print(exc, file=sys.stderr)
        sys.exit(UNAVAILABLE)
    with open(os.path.join(root, "versions.txt"), "w") as out:
        out.writelines(f"{f['Package']} {f['Version']}\n" for f in chosen)
    print(f"{len(chosen)} packages from Debian {SUITE} unpacked in {root}/tree")


if __name__ == "__main__":
    main()
