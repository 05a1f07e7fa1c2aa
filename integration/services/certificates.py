"""A throw-away certificate authority and a server certificate for TLS listeners in tests.

Everything is made in-process with the ``cryptography`` library (no ``openssl`` or ``keytool``
binary): an EC P-256 CA, and a server certificate it signs whose subject alternative names are
the hosts clients dial (``127.0.0.1`` and ``localhost`` by default), so hostname verification
(librdkafka's default ``ssl.endpoint.identification.algorithm=https``) passes. Kafka reads the PEM
files directly (``ssl.keystore.type=PEM``, KIP-651). The private keys are written unencrypted with
mode 0600: they protect a broker that lives for one test session on the loopback interface.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=2)
"""How long the certificates are valid (from one hour before they are made)."""


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of one CA and one server certificate it signed.

    Attributes:
        ca_cert: the CA certificate (the clients' trust store: ``ssl.ca.location``).
        server_cert: the server certificate followed by the CA's (the chain a server presents).
        server_key: the server's PKCS#8 private key, unencrypted, mode 0600.
        server_keystore: ``server_key`` and ``server_cert`` in one file (Kafka's PEM key store).
    """

    ca_cert: Path
    server_cert: Path
    server_key: Path
    server_keystore: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "twophase tests"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _san(hosts: tuple[str, ...]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def _write(path: Path, data: bytes, private: bool = False) -> Path:
    path.write_bytes(data)
    if private:
        os.chmod(path, 0o600)
    return path


def make_tls_files(
    directory: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"), name: str = "twophase"
) -> TlsFiles:
    """Make a CA and a server certificate for ``hosts`` in ``directory`` (created, mode 0700).

    Args:
        directory: where the PEM files go (``<name>-ca.pem``, ``<name>-server.pem``, …).
        hosts: IP addresses and DNS names the server certificate is valid for (its SANs).
        name: file-name prefix and the certificates' common names.

    Returns:
        The files' paths.
    """
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"{name} test CA")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALIDITY)
        .add_extension(_san(hosts), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    ca_pem = ca.public_bytes(pem)
    chain_pem = server.public_bytes(pem) + ca_pem
    key_pem = server_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return TlsFiles(
        ca_cert=_write(directory / f"{name}-ca.pem", ca_pem),
        server_cert=_write(directory / f"{name}-server.pem", chain_pem),
        server_key=_write(directory / f"{name}-server.key", key_pem, private=True),
        server_keystore=_write(directory / f"{name}-server-keystore.pem", key_pem + chain_pem, private=True),
    )
