"""How the S3 checkpoint storage reads S3 errors: which are worth retrying, which mean "not
found" or "precondition failed" (the conditional PUT's 412)."""

from __future__ import annotations

from botocore.exceptions import ClientError, HTTPClientError, IncompleteReadError
from botocore.exceptions import ConnectionError as BotoConnectionError

_TRANSIENT_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "SlowDown",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "ConditionalRequestConflict",  # 409: a concurrent conditional write is in flight
        "XMinioServerNotInitialized",
    }
)
NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
PRECONDITION_FAILED_CODES = frozenset({"PreconditionFailed", "412"})


def is_transient(error: BaseException) -> bool:
    """Whether an S3 call that raised ``error`` is worth retrying.

    True for connection and HTTP-client errors, truncated bodies, throttling, request timeouts,
    HTTP 429 and 5xx, and ``ConditionalRequestConflict``; false for everything else (404, 403, 412…).
    """
    if isinstance(error, BotoConnectionError | HTTPClientError | IncompleteReadError):
        return True
    if isinstance(error, ClientError):
        code = error_code(error)
        status = http_status(error)
        if code == "NotImplemented":  # 501: e.g. a server without conditional writes; retrying won't help
            return False
        return code in _TRANSIENT_CODES or status == 429 or status >= 500
    return False


def error_code(error: ClientError) -> str:
    """The S3 error code of ``error`` (``""`` if none)."""
    return str(error.response.get("Error", {}).get("Code", ""))


def http_status(error: ClientError) -> int:
    """The HTTP status of ``error`` (0 if unknown)."""
    return int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
