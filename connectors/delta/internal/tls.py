"""The Delta sink's TLS trust: the CA bundle of the standard ``AWS_CA_BUNDLE`` for its two S3 clients.

boto3 reads ``AWS_CA_BUNDLE`` itself; the Delta sink's other clients do not:

- pyarrow's S3 file system (the executors' data files) takes the bundle as ``tls_ca_file_path``
  (:func:`aws_ca_bundle`, used by :func:`twophase.connectors.delta.internal.filesystem.open_location`);
- delta-rs (the driver's log commits and reads) builds its TLS roots from ``SSL_CERT_FILE`` when
  it opens a table and has no option for a CA bundle. :func:`trust_aws_ca_bundle_in_delta_rs` sets
  ``SSL_CERT_FILE`` of this process to a bundle holding the CAs it trusted so far (the file
  ``SSL_CERT_FILE`` named, else OpenSSL's default file) plus those of ``AWS_CA_BUNDLE``: trust is
  only ever added, so every other HTTPS client of the process keeps working.
"""

from __future__ import annotations

import hashlib
import logging
import os
import ssl
import tempfile
import threading
from collections.abc import MutableMapping
from pathlib import Path

from twophase.sinks.errors import ConfigError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

CA_BUNDLE_ENV = "AWS_CA_BUNDLE"
"""The standard variable naming a PEM file of the CA certificates that S3 clients trust."""
SSL_CERT_FILE_ENV = "SSL_CERT_FILE"
"""The variable delta-rs (rustls' native roots) reads its trusted CAs from."""

_lock = threading.Lock()


def aws_ca_bundle(env: MutableMapping[str, str] | None = None) -> str | None:
    """The file ``AWS_CA_BUNDLE`` names in ``env`` (default ``os.environ``), or ``None`` when unset.

    Raises:
        ConfigError: it names something that is not a file.
    """
    env = os.environ if env is None else env
    path = env.get(CA_BUNDLE_ENV) or None
    if path is not None and not os.path.isfile(path):
        raise ConfigError(
            f"{CA_BUNDLE_ENV}={path!r} is not a file: point it at a PEM file of the CA certificates "
            "that sign the S3 endpoint's certificate, or unset it"
        )
    return path


def trust_aws_ca_bundle_in_delta_rs(env: MutableMapping[str, str] | None = None) -> str | None:
    """Make delta-rs trust ``AWS_CA_BUNDLE``'s CAs too, by pointing ``SSL_CERT_FILE`` at a bundle
    of the CAs trusted so far plus those; idempotent, thread-safe.

    The combined bundle is written once per content to the temporary folder
    (``twophase-ca-<digest>.pem``, certificates only, nothing secret).

    Args:
        env: the environment to read and update (default ``os.environ``, which delta-rs reads).

    Returns:
        The file ``SSL_CERT_FILE`` names afterwards, or ``None`` when ``AWS_CA_BUNDLE`` is unset
        (nothing is changed then).

    Raises:
        ConfigError: ``AWS_CA_BUNDLE`` or ``SSL_CERT_FILE`` names something that is not a
            readable file.
    """
    env = os.environ if env is None else env
    with _lock:
        bundle = aws_ca_bundle(env)
        if bundle is None:
            return None
        current = env.get(SSL_CERT_FILE_ENV) or None
        if current == bundle:
            return bundle
        base = current or ssl.get_default_verify_paths().openssl_cafile
        try:
            extra = Path(bundle).read_bytes()
            trusted = Path(base).read_bytes() if base and os.path.isfile(base) else b""
        except OSError as e:
            raise ConfigError(f"cannot read a CA bundle for delta-rs ({e}); check {CA_BUNDLE_ENV}") from e
        if extra in trusted:  # already combined (or the bundle is part of the trusted file)
            return current or bundle
        combined = trusted.rstrip(b"\n") + b"\n" + extra if trusted else extra
        digest = hashlib.sha256(combined).hexdigest()[:16]
        target = Path(tempfile.gettempdir()) / f"twophase-ca-{digest}.pem"
        if not target.is_file():
            fd, partial = tempfile.mkstemp(prefix=".twophase-ca-", dir=target.parent)
            with os.fdopen(fd, "wb") as out:
                out.write(combined)
            os.replace(partial, target)
        env[SSL_CERT_FILE_ENV] = str(target)
        log_event(
            log,
            logging.INFO,
            "delta-rs trusts AWS_CA_BUNDLE",
            ssl_cert_file=str(target),
            aws_ca_bundle=bundle,
            previous=current,
        )
        return str(target)
