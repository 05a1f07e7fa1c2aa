"""How every S3 client of the project reaches S3: one options object over the standard AWS chain.

The S3 sink, the Delta sink, checkpoint storage on ``s3://``, the Data Source facade and the CLI
build their clients from :class:`S3Options`. A field left ``None`` comes from the standard AWS
configuration, as boto3 and delta-rs resolve it: ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/
``AWS_SESSION_TOKEN``, ``AWS_ENDPOINT_URL_S3`` then ``AWS_ENDPOINT_URL``, ``AWS_REGION`` (or
``AWS_DEFAULT_REGION``), ``AWS_PROFILE`` and the shared config and credentials files, then
container and instance roles. Explicit fields override it.

Secrets (keys, session token) are hidden from ``repr``, never logged, and never written into
checkpoint metadata: committables name buckets and keys only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from twophase.sinks.errors import ConfigError, MissingExtraError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
"""Endpoint variables in the order the AWS SDKs read them (service-specific first)."""
REGION_ENV = ("AWS_REGION", "AWS_DEFAULT_REGION")
IGNORE_ENDPOINTS_ENV = "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"

_SECRETS = frozenset({"access_key_id", "secret_access_key", "session_token"})
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


@dataclass(frozen=True)
class S3Options:
    """Explicit S3 settings; every ``None`` field comes from the standard AWS chain.

    Attributes:
        endpoint_url: e.g. ``http://127.0.0.1:9000`` for MinIO; ``None``: ``AWS_ENDPOINT_URL_S3``,
            ``AWS_ENDPOINT_URL``, else AWS itself.
        region: e.g. ``eu-west-1``; ``None``: ``AWS_REGION``/``AWS_DEFAULT_REGION``/the profile.
        access_key_id / secret_access_key / session_token: explicit credentials (hidden from
            ``repr``); ``None``: the credential chain (environment, profile, roles).
        profile: a named profile of the shared config files (not together with explicit keys).
        path_style: path-style addressing; ``None``: path style when an endpoint is set (MinIO and
            most S3-compatible servers), the SDK's default on AWS.
        verify_tls: verify the server's TLS certificate (``False`` only for test servers), against
            the CA bundle of ``AWS_CA_BUNDLE`` when set, else the default one.

    Raises:
        ConfigError: a key without its secret, a token without keys, keys together with a
            profile, or an endpoint that is not an ``http(s)://host`` URL or carries credentials.
    """

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    profile: str | None = None
    path_style: bool | None = None
    verify_tls: bool = True

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value == "" and f.name not in ("path_style", "verify_tls"):
                object.__setattr__(self, f.name, None)  # an empty value counts as unset
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ConfigError("S3 access_key_id and secret_access_key must be given together (or neither)")
        if self.session_token is not None and self.access_key_id is None:
            raise ConfigError("S3 session_token needs access_key_id and secret_access_key")
        if self.profile is not None and self.access_key_id is not None:
            raise ConfigError("give S3 access keys or a profile, not both")
        if self.endpoint_url is not None:
            check_endpoint(self.endpoint_url)

    def __repr__(self) -> str:
        shown = (
            f"{f.name}='***'" if f.name in _SECRETS else f"{f.name}={getattr(self, f.name)!r}"
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None
        )
        return f"S3Options({', '.join(shown)})"

    __str__ = __repr__

    @classmethod
    def from_strings(cls, options: Mapping[str, str], prefix: str = "") -> S3Options:
        """Options from strings, e.g. a Data Source's ``.option("s3.endpoint_url", …)``.

        Keys (any case, after ``prefix``): the field names; ``path_style`` and ``verify_tls`` take
        ``true``/``false``. Keys without ``prefix`` are ignored.

        Raises:
            ConfigError: an unknown key after ``prefix``, a bad boolean, or invalid settings.
        """
        names = {f.name for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for key, raw in options.items():
            k = key.lower()
            if not k.startswith(prefix.lower()):
                continue
            name = k[len(prefix) :]
            if name not in names:
                raise ConfigError(f"unknown S3 option {key!r}; known: {sorted(prefix + n for n in names)}")
            values[name] = parse_bool(key, raw) if name in ("path_style", "verify_tls") else raw
        return cls(**values)

    def resolved(self, env: Mapping[str, str]) -> S3Options:
        """These options with the endpoint and region filled from ``env`` where unset.

        Credentials and profiles are left to the SDKs, which resolve (and refresh) them.
        """
        endpoint = self.endpoint_url
        if endpoint is None and env.get(IGNORE_ENDPOINTS_ENV, "").lower() not in _TRUE:
            endpoint = next((env[k] for k in ENDPOINT_ENV if env.get(k)), None)
        region = self.region or next((env[k] for k in REGION_ENV if env.get(k)), None)
        return dataclasses.replace(self, endpoint_url=endpoint, region=region)

    @property
    def use_path_style(self) -> bool:
        """Path-style addressing: ``path_style``, else whenever an endpoint is set."""
        return self.path_style if self.path_style is not None else self.endpoint_url is not None

    def boto3_client(
        self, connect_timeout_ms: int = 10_000, read_timeout_ms: int = 60_000, max_attempts: int = 1
    ) -> S3Client:
        """A boto3 S3 client. botocore's own retries are off by default (``max_attempts=1``):
        callers retry with tenacity.

        Call on :meth:`resolved` options so that the addressing style follows the endpoint.

        Raises:
            MissingExtraError: boto3 is not installed (the ``s3`` extra).
        """
        boto3 = import_boto3()
        from botocore.config import Config

        config = Config(
            retries={"mode": "standard", "total_max_attempts": max_attempts},
            connect_timeout=connect_timeout_ms / 1000.0,
            read_timeout=read_timeout_ms / 1000.0,
            s3={"addressing_style": "path" if self.use_path_style else "auto"},
        )
        session = boto3.session.Session(
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            aws_session_token=self.session_token,
            region_name=self.region,
            profile_name=self.profile,
        )
        # verify=None, not True: botocore then takes AWS_CA_BUNDLE (or the profile's ca_bundle);
        # an explicit True would verify against its default bundle alone and refuse a private CA
        verify = None if self.verify_tls else False
        client: S3Client = session.client("s3", endpoint_url=self.endpoint_url, config=config, verify=verify)
        return client

    def frozen_credentials(self) -> tuple[str, str, str | None] | None:
        """(key id, secret, token) of the explicit keys, or of ``profile`` as boto3 resolves it
        now; ``None`` when neither is set (the caller's SDK resolves its own chain). For clients
        that cannot take a profile (pyarrow's S3 file system)."""
        if self.access_key_id is not None and self.secret_access_key is not None:
            return (self.access_key_id, self.secret_access_key, self.session_token)
        if self.profile is None:
            return None
        credentials = import_boto3().session.Session(profile_name=self.profile).get_credentials()
        if credentials is None:
            raise ConfigError(f"S3 profile {self.profile!r} has no credentials")
        frozen = credentials.get_frozen_credentials()
        if frozen.access_key is None or frozen.secret_key is None:
            raise ConfigError(f"S3 profile {self.profile!r} has no credentials")
        return frozen.access_key, frozen.secret_key, frozen.token

    def delta_rs_options(self) -> dict[str, str]:
        """The same settings in delta-rs ``storage_options`` spelling (holds secrets: never log it).

        Call on :meth:`resolved` options. delta-rs refuses plain ``http://`` endpoints unless
        ``AWS_ALLOW_HTTP`` is set, which is derived here from the endpoint's scheme.
        """
        out: dict[str, str] = {}
        pairs = (
            ("AWS_ENDPOINT_URL", self.endpoint_url),
            ("AWS_REGION", self.region),
            ("AWS_ACCESS_KEY_ID", self.access_key_id),
            ("AWS_SECRET_ACCESS_KEY", self.secret_access_key),
            ("AWS_SESSION_TOKEN", self.session_token),
            ("AWS_PROFILE", self.profile),
        )
        out.update({k: v for k, v in pairs if v is not None})
        if self.endpoint_url is not None and urlsplit(self.endpoint_url).scheme == "http":
            out["AWS_ALLOW_HTTP"] = "true"
        if self.endpoint_url is not None or self.path_style is not None:
            out["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false" if self.use_path_style else "true"
        if not self.verify_tls:
            out["AWS_ALLOW_INVALID_CERTIFICATES"] = "true"
        return out


BOTO3_LIBRARIES = frozenset({"boto3", "botocore", "s3transfer"})
"""The top-level modules of boto3 and what it installs with it (the ``s3`` extra)."""


def is_boto3_missing(error: ModuleNotFoundError) -> bool:
    """Whether ``error`` is a missing boto3 (or one of :data:`BOTO3_LIBRARIES`)."""
    return (error.name or "").split(".")[0] in BOTO3_LIBRARIES


def import_boto3(needed_by: str = "S3 access") -> ModuleType:
    """boto3, imported on first use: it is the ``s3`` extra's, not the core install's.

    Raises:
        MissingExtraError: boto3 is not installed (``needed_by`` names what needed it), naming
            ``pip install 'twophase[s3]'``.
    """
    try:
        import boto3
    except ModuleNotFoundError as e:
        if not is_boto3_missing(e):
            raise
        raise MissingExtraError("s3", "s3", "boto3", needed_by=needed_by) from None
    return boto3


def check_endpoint(url: str) -> None:
    """Raises ConfigError: ``url`` is not an ``http(s)://host[:port]`` URL, or carries credentials."""
    parts = urlsplit(url)
    if parts.username or parts.password:  # checked first: the URL must not reach the message
        raise ConfigError("S3 endpoint_url must not carry credentials; use access_key_id/secret_access_key")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"S3 endpoint_url must be an http(s):// URL, got {url!r}")


def parse_bool(key: str, raw: str) -> bool:
    """``true``/``false`` (also 1/0, yes/no, on/off) as a bool.

    Raises:
        ConfigError: anything else, naming ``key``.
    """
    value = str(raw).strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"option {key!r} must be true or false, got {raw!r}")
