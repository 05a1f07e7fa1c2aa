"""The project's exception hierarchy: one module, so callers catch by meaning, not by origin.

Every error the project raises on purpose derives from :class:`TwoPhaseError`. Errors about the
user's input (configuration, schemas, records) are raised *before* anything is written.
"""

from __future__ import annotations


class TwoPhaseError(Exception):
    """Base class of every error twophase raises on purpose."""


class ConfigError(TwoPhaseError, ValueError):
    """Bad configuration, detected before anything is written (e.g. a timeout above the broker's max)."""


class UnsupportedSparkError(ConfigError):
    """The installed Spark lacks an API a feature needs (e.g. ``.format("twophase")`` on Spark 3.5,
    which has no Python Data Source API); the message names the Spark version the feature needs."""


class MissingExtraError(ConfigError):
    """A connector was used where its client library is not installed: the twophase extra that
    brings it is missing (a PostgreSQL-only install has no Kafka library, for example).

    Raised when the connector's sink or config class is first loaded, before anything is written.
    The message is one line naming the connector, the missing library and the command to run,
    e.g. ``pip install 'twophase[kafka]'``, on the driver and the executors alike.

    Checkpoint storage on ``s3://`` raises it too: boto3 is the ``s3`` extra's, not the core
    install's (``needed_by`` then names the storage instead of a connector).

    Attributes:
        kind: the connector's kind, e.g. ``"kafka"``.
        extra: the pip extra that brings its libraries, e.g. ``"kafka"``.
        library: the missing library's distribution name, e.g. ``"confluent-kafka"``.
    """

    def __init__(self, kind: str, extra: str, library: str, *, needed_by: str | None = None) -> None:
        super().__init__(
            f"{needed_by or f'connector {kind!r}'} needs {library}, which is not installed where this runs: "
            f"pip install 'twophase[{extra}]' (on the driver and the executors, or the Connect server)"
        )
        self.kind = kind
        self.extra = extra
        self.library = library


class SchemaError(TwoPhaseError, ValueError):
    """The data's schema cannot be taken by a sink (unknown column, type clash), found before writing."""


class RecordError(TwoPhaseError, ValueError):
    """One record cannot be written (e.g. larger than the topic's ``max.message.bytes``).

    The message names the record's position (partition, batch offset) so it can be found.
    """


class ServiceUnavailableError(TwoPhaseError, ConnectionError):
    """An external system (broker, S3 endpoint) cannot be reached after retrying with backoff."""


class CommittableDecodeError(TwoPhaseError, ValueError):
    """Committable or checkpoint JSON is malformed, of an unknown kind, or of an unsupported version."""


class IllegalTransitionError(TwoPhaseError, RuntimeError):
    """A lifecycle or state-machine transition that the protocol does not allow.

    Raised by the subtask lifecycle (FLIP-147 table), the checkpoint coordinator and the job
    lifecycle alike, naming the machine, the current state and the attempted transition.
    """

    def __init__(self, machine: str, state: str, transition: str) -> None:
        super().__init__(f"{machine}: illegal transition {transition!r} from state {state}")
        self.machine = machine
        self.state = state
        self.transition = transition


class CommitFailedError(TwoPhaseError, RuntimeError):
    """A commit ended FATAL, or kept asking for RETRY past the retry budget. The job fails."""


class CommitWaitTimeoutError(CommitFailedError):
    """A wait for asynchronous commits passed its bound (e.g. an epoch held back for the commits
    its sink's name pool depends on); the message names the commits waited for. The job fails."""


class TransactionLostError(CommitFailedError):
    """The external system aborted a pre-committed transaction (e.g. Kafka's transaction timeout).

    Data was lost. Raised loudly unless the user opted in to ignoring it, like Flink's
    ``ignoreFailuresAfterTransactionTimeout``. The message names the sink and the transaction.
    """


class ConcurrentAttemptError(TwoPhaseError, RuntimeError):
    """A pre-committed transaction is no longer as its acknowledged attempt left it: another attempt
    of the same subtask (a zombie after a stage retry, a speculative copy) fenced or overwrote it.
    Found before the checkpoint is persisted, so nothing is lost: the epoch fails and is retried."""


class CheckpointStorageError(TwoPhaseError, OSError):
    """Checkpoint storage cannot be read or written; the message names the file or object."""


class CheckpointNotPublishedError(CheckpointStorageError):
    """Publishing a checkpoint failed and it is proven not visible: nothing was written, a write
    was refused for good before any attempt could have landed, or the id holds another writer's
    checkpoint. Its transactions may be aborted. Any other publish error means "unknown"."""


class CheckpointPublishUnknownError(CheckpointStorageError):
    """Publishing a checkpoint failed after it may have become visible: the outcome is unknown
    (an S3 PUT whose every retry failed without a definitive answer; a directory fsync that failed
    after the link). Its transactions are neither committed nor aborted; the job fails and the
    restore decides from what storage shows."""


class CorruptCheckpointError(CheckpointStorageError):
    """A checkpoint's ``_metadata`` is unreadable or invalid. Never silently skipped."""


class CommittableFileError(CorruptCheckpointError):
    """A committable file a checkpoint's manifest names (checkpoint format v3) is missing, or its
    bytes do not match the manifest's size, sha256 or row count. The checkpoint is refused, never
    read as holding nothing to commit; the message names the manifest and the file."""


class JobError(TwoPhaseError, RuntimeError):
    """A job cannot run as asked (e.g. the stored Spark query id differs from the Spark checkpoint's)."""


class DriverFencedError(JobError):
    """A newer driver of the same job claimed it (issue #43): this driver stops publishing,
    committing and cleaning up, and is not restarted. The message is one line naming this
    driver's epoch and the newer one's (where and when it started).

    Two drivers of one job are ordinary on YARN (an application-master retry while the old one
    runs), on Kubernetes (a replaced driver pod) and with schedulers that retry; as Flink's
    leader election does for its JobManager, the newest claim wins (``_drivers/`` in checkpoint
    storage, :class:`~twophase.coordinator.checkpoint.driver_fence.DriverFence`).
    """


class LingeringCleanupError(TwoPhaseError, RuntimeError):
    """Lingering cleanup could not abort every lingering transaction it found; it went on past each
    failure, aborted all the others, and names each one it could not (the first is the cause)."""


class RefusedError(ConfigError):
    """An external system refused this job for good: a permission it lacks (an IAM action, a Kafka
    ACL), credentials it does not take, or a server certificate the configured CA does not verify.

    A refusal is permanent: no client retry (tenacity) and no restart of the job (the restart
    strategy) can cure it, so neither tries, as Flink's ``ThrowableType.NonRecoverableError``; the
    job ends with :class:`JobRefusedError`. The message is one line naming the permission or the
    setting to change, and what the refused operation left behind, if anything.

    Attributes:
        left: what the refused operation could not clean up (``s3://`` keys of objects, multipart
            uploads), for the user to remove or to leave to lingering cleanup; empty if nothing.
    """

    left: tuple[str, ...] = ()


class TlsCertificateError(RefusedError):
    """A server's TLS certificate was not verified (an unknown CA, an expired certificate, a host
    name it does not name): the client is configured to trust another CA than the server's.

    Raised at the first call instead of being retried as an outage. The one-line message names
    the endpoint, the CA file in use and the setting that chooses it (``AWS_CA_BUNDLE`` for S3,
    ``S3Options.verify_tls``), with the TLS library's reason.

    Attributes:
        endpoint: the server, e.g. ``"https://minio:9000"``.
        setting: the setting that names the CA file, e.g. ``"AWS_CA_BUNDLE"``.
    """

    def __init__(self, endpoint: str, setting: str, ca_file: str | None, reason: str) -> None:
        trusted = f"{setting}={ca_file}" if ca_file else f"the default CA bundle ({setting} is not set)"
        super().__init__(
            f"the TLS certificate of {endpoint} was not verified with {trusted}: {reason}; set {setting} "
            "to a PEM file holding the CA that signed the server's certificate"
        )
        self.endpoint = endpoint
        self.setting = setting


class JobRefusedError(JobError):
    """The job ended on a :class:`RefusedError` at once, without a restart: a restart meets the same
    refusal (a missing permission, an untrusted certificate), so the restart strategy does not
    retry it. Raised by the driver, also when the refusal was met on an executor (where it reaches
    the driver only as the text of Spark's task failure).

    The message is one line: ``job <id> refused, not restarted: <Type>: <the refusal's line>``,
    which names the permission or certificate setting and what the refused step left behind.

    Attributes:
        refusal: the refusal's type name, e.g. ``"KafkaAuthorizationError"``.
    """

    def __init__(self, job_id: str, refusal: str, line: str) -> None:
        super().__init__(f"job {job_id} refused, not restarted: {refusal}: {line}")
        self.refusal = refusal


class S3AccessDeniedError(RefusedError):
    """S3 refused a request for lack of permission (``AccessDenied``, or a bare 403 on a HEAD).

    Raised by the S3 and Delta sinks. The message is one line naming the IAM action to allow (e.g.
    ``s3:AbortMultipartUpload``), the ``s3://`` key or prefix it was refused on and the S3
    operation; checkpoint storage keeps its own error types and names the same in the message.

    A refused delete also lists what it left: the ``s3://`` keys it could not delete (the first
    :data:`LEFT_LISTED`, then how many more), for the user to remove once the policy allows it.

    Attributes:
        action: the IAM action, e.g. ``"s3:PutObject"``.
        uri: ``s3://bucket/key`` (or ``s3://bucket/prefix``, ``s3://bucket``).
        operation: the S3 operation that was refused, e.g. ``"CreateMultipartUpload"``.
        detail: S3's error code, or why a bare 403 is read as a refusal.
        left: the ``s3://`` objects the refused operation left behind (a refused delete's keys).
    """

    def __init__(
        self,
        action: str,
        uri: str,
        operation: str,
        detail: str = "AccessDenied",
        left: tuple[str, ...] = (),
    ) -> None:
        listed = ""
        if left:
            more = f" and {len(left) - LEFT_LISTED} more" if len(left) > LEFT_LISTED else ""
            listed = f"; left behind ({len(left)}): {', '.join(left[:LEFT_LISTED])}{more}"
        super().__init__(
            f"S3 denied {action} on {uri} ({operation}: {detail}); allow {action} on it in the IAM "
            f"policy of the credentials in use (docs/secured-s3.md lists the actions twophase needs){listed}"
        )
        self.action = action
        self.uri = uri
        self.operation = operation
        self.detail = detail
        self.left = left

    def leaving(self, left: tuple[str, ...]) -> S3AccessDeniedError:
        """The same refusal, listing ``left`` as what it left behind."""
        return S3AccessDeniedError(self.action, self.uri, self.operation, self.detail, left)


LEFT_LISTED = 20
"""How many objects a refusal's one line lists by name; it counts the rest."""


def find_refusal(error: BaseException) -> tuple[str, str] | None:
    """The :class:`RefusedError` that ``error`` is or was caused by, as ``(type name, its line)``;
    ``None`` when it is no refusal (an outage, a crash, a lost transaction...).

    Found through ``__cause__``/``__context__``, and in the text of errors that carry another
    process's traceback: a refusal met on an executor reaches the driver as Spark's
    ``PythonException``, whose message holds the worker's traceback ending in
    ``twophase....KafkaAuthorizationError: <its line>``. A type name counts when it is
    :class:`RefusedError` or a subclass of it known here (every connector's errors module is
    imported on the driver with its sink).
    """
    names = _refusal_names()
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, RefusedError):
            lines = str(current).splitlines()
            return type(current).__name__, lines[0].strip() if lines else ""
        for line in reversed(str(current).splitlines()):
            head, sep, rest = line.strip().partition(": ")
            if sep and head.rsplit(".", 1)[-1] in names and " " not in head:
                return head.rsplit(".", 1)[-1], rest.strip()
        current = current.__cause__ or current.__context__
    return None


def _refusal_names() -> frozenset[str]:
    found: set[str] = set()
    pending: list[type[BaseException]] = [RefusedError]
    while pending:
        cls = pending.pop()
        found.add(cls.__name__)
        pending.extend(cls.__subclasses__())
    return frozenset(found)


def error_summary(error: BaseException) -> str:
    """One line for ``error``, for messages that wrap it (``JobError``'s "last error: ...").

    An executor's failure reaches the driver as Spark's ``PythonException`` (or a Py4J error) whose
    message is a whole traceback; its meaning is the traceback's last ``Type: message`` line, e.g.
    ``KafkaAuthorizationError: ... denied Write on topic 'orders'``. Other errors give their type
    and the first line of their message.
    """
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if any(line.startswith("Traceback (most recent call last)") for line in lines):
        for line in reversed(lines):
            head = line.split(":", 1)[0]
            if line != head and head.replace(".", "").replace("_", "").isalnum() and " " not in head:
                return line
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
