"""CompleteMultipartUpload answering HTTP 200 with an ``<Error>`` body, through the real botocore.

S3 may send the status line before it finishes combining parts, then report a failure in the
body. MinIO cannot be made to do this on demand, so a tiny local HTTP server plays S3 for this one
call; the client, parsing and retries are the real boto3/botocore/tenacity stack.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from twophase.connectors.s3 import PendingFile, S3SinkConfig
from twophase.connectors.s3.internal.committable import UploadedPart
from twophase.connectors.s3.internal.committer import commit_file
from twophase.connectors.s3.internal.uploads import S3Ops, make_client
from twophase.sinks.outcome import CommitOutcome
from twophase.sinks.s3_options import S3Options

ERROR_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
    b"<Message>We encountered an internal error. Please try again.</Message>"
    b"<RequestId>r</RequestId><HostId>h</HostId></Error>"
)
OK_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b'<CompleteMultipartUploadResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
    b"<Location>http://x/bucket/k</Location><Bucket>bucket</Bucket><Key>k</Key>"
    b"<ETag>&quot;abc-1&quot;</ETag></CompleteMultipartUploadResult>"
)


class _Server(ThreadingHTTPServer):
    errors_left = 0
    posts = 0


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.posts += 1
        body = OK_BODY
        if self.server.errors_left > 0:
            self.server.errors_left -= 1
            body = ERROR_BODY
        self.send_response(200)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _ops(server: _Server, attempts: int) -> S3Ops:
    config = S3SinkConfig(
        bucket="bucket",
        prefix="p",
        storage_options=S3Options(
            endpoint_url=f"http://127.0.0.1:{server.server_address[1]}",
            region="us-east-1",
            access_key_id="test",
            secret_access_key="test-secret",
        ),
        max_attempts=attempts,
        retry_initial_backoff_ms=1,
        retry_max_backoff_ms=2,
    )
    return S3Ops(make_client(config), config)


FILE = PendingFile("bucket", "k", "upload-1", (UploadedPart(1, '"e"', 3),), 3, 1)


def test_200_with_error_body_is_retried_then_commits(server: _Server) -> None:
    server.errors_left = 2
    assert commit_file(_ops(server, attempts=3), FILE) is CommitOutcome.COMMITTED
    assert server.posts == 3


def test_200_with_error_body_every_time_is_retry_not_success(server: _Server) -> None:
    server.errors_left = 10
    assert commit_file(_ops(server, attempts=2), FILE) is CommitOutcome.RETRY
    assert server.posts == 2  # one botocore attempt per tenacity attempt
