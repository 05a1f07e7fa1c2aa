"""Resolve a POM's runtime classpath into a cache folder with Maven, once.

The folder is complete when its marker file holds the SHA-256 of the POM (and of the settings file)
that produced it; changing the POM therefore re-resolves, and a warm cache touches no network.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from twophase.integration.services.cache import file_lock
from twophase.sinks.errors import ServiceUnavailableError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

JVM_DIR = Path(__file__).resolve().parent / "jvm"
SETTINGS = JVM_DIR / "settings.xml"
MARKER = ".resolved"


def pom_digest(pom: Path, properties: Mapping[str, str] | None = None) -> str:
    """Hex SHA-256 over the POM, the Maven settings file and the ``-D`` properties it is resolved with."""
    digest = hashlib.sha256(pom.read_bytes())
    digest.update(SETTINGS.read_bytes())
    for key, value in sorted((properties or {}).items()):
        digest.update(f"\0{key}={value}".encode())
    return digest.hexdigest()


def resolve_jars(pom: Path, out_dir: Path, properties: Mapping[str, str] | None = None) -> list[Path]:
    """Copy ``pom``'s runtime dependencies into ``out_dir`` unless already done; return the jars.

    ``properties`` are passed to Maven as ``-Dkey=value`` (they set the POM's properties and
    activate its profiles).

    Runs ``mvn -q -B dependency:copy-dependencies`` into a sibling temporary folder and renames it
    into place, so an interrupted download never looks complete. Holds a lock so that concurrent
    callers resolve once.

    Raises:
        ServiceUnavailableError: ``mvn`` is missing or fails (e.g. Maven Central unreachable); the
            message carries Maven's last error line.
    """
    want = pom_digest(pom, properties)
    marker = out_dir / MARKER
    with file_lock(out_dir.parent / f".{out_dir.name}.lock"):
        if marker.is_file() and marker.read_text().strip() == want:
            return sorted(out_dir.glob("*.jar"))
        mvn = shutil.which("mvn")
        if mvn is None:
            raise ServiceUnavailableError("Maven ('mvn') is not on PATH; install it (e.g. apt install maven)")
        staging = out_dir.with_name(out_dir.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        cmd = [
            mvn,
            "-q",
            "-B",
            "-gs",
            str(SETTINGS),
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={staging}",
            *(f"-D{key}={value}" for key, value in sorted((properties or {}).items())),
        ]
        log_event(log, logging.INFO, "resolving jars", pom=pom, out=out_dir)
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            errors = [line for line in proc.stdout.splitlines() if "[ERROR]" in line] or [proc.stderr.strip()]
            raise ServiceUnavailableError(f"Maven could not resolve {pom.name}: {errors[0].strip()}")
        shutil.rmtree(out_dir, ignore_errors=True)
        staging.rename(out_dir)
        marker.write_text(want + "\n")
        return sorted(out_dir.glob("*.jar"))
