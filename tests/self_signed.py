"""A self-signed certificate for localhost and 127.0.0.1 (openssl), for the TLS tests."""

import subprocess
from pathlib import Path


def self_signed(directory: Path) -> tuple[Path, Path]:
    """``(cert, key)`` PEM files in ``directory``, valid for a day."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key
