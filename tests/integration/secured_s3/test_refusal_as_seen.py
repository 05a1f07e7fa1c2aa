"""A refusal as the user sees it (#45 item 8): the job of ``refused_job.py`` run in a process of
its own, as a user's script, against TLS MinIO with the least-privilege policy less
``s3:DeleteObject`` (or with a CA file that is not MinIO's).

Before: three restarts, 532 lines of stderr and 17 tracebacks for the DeleteObject case, and a
wrong CA read as an outage after 5 attempts. Now the process ends with exit code 1, its stderr's
last line is the one-line error naming the permission and what the job left
(``JobRefusedError``) or the certificate setting (``TlsCertificateError``, met by the checkpoint
storage's first call, before the query starts), the job failed at most once, and nothing was
restarted. What else stderr holds is Spark's own log of the query ending with an error (its
Python and Java stack) and Python's report of the uncaught error with its cause; the figures
are printed for the record (CHANGELOG.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.exactly_once.support import make_input
from support.refusal_seen import Seen, run_as_user

from twophase.integration.services.certificates import make_tls_files
from twophase.integration.services.s3_tls import LEAST_PRIVILEGE_ACTIONS, TlsMinioServer

from .conftest import BUCKET, JobUser, MakeUser

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.slow]

HERE = Path(__file__).parent


def _run_as_user(user: JobUser, work: Path, ca_bundle: Path) -> Seen:
    make_input(work, files=3, rows_per_file=20)
    return run_as_user(
        HERE / "refused_job.py",
        work,
        {
            "REFUSED_JOB_ENDPOINT": user.endpoint.endpoint_url,
            "REFUSED_JOB_REGION": user.endpoint.region,
            "REFUSED_JOB_ACCESS_KEY": user.endpoint.access_key,
            "REFUSED_JOB_SECRET_KEY": user.endpoint.secret_key,
            "REFUSED_JOB_BUCKET": BUCKET,
            "REFUSED_JOB_PREFIX": user.prefix,
            "AWS_CA_BUNDLE": str(ca_bundle),
        },
    )


def test_a_missing_delete_permission_ends_the_users_process_with_one_line_naming_it(
    tls_minio: TlsMinioServer, make_user: MakeUser, tmp_path: Path
) -> None:
    user = make_user(tuple(a for a in LEAST_PRIVILEGE_ACTIONS if a != "s3:DeleteObject"))
    last = _run_as_user(user, tmp_path, tls_minio.certificates.ca_bundle).last_line()
    assert last.startswith("twophase.sinks.errors.JobRefusedError: ") and "not restarted" in last, last
    for name in ("S3 denied s3:DeleteObject", f"s3://{BUCKET}/{user.prefix}/", "; left "):
        assert name in last, last


def test_a_wrong_ca_file_ends_the_users_process_with_one_line_naming_the_setting(
    tls_minio: TlsMinioServer, make_user: MakeUser, tmp_path: Path
) -> None:
    other = make_tls_files(tmp_path / "other-ca", name="other")
    last = _run_as_user(make_user(), tmp_path / "work", other.ca_cert).last_line()
    # refused by the checkpoint storage's first call, before the query starts, or by the job
    assert last.startswith(
        ("twophase.sinks.errors.TlsCertificateError: ", "twophase.sinks.errors.JobRefusedError: ")
    )
    for name in ("certificate", "AWS_CA_BUNDLE", str(other.ca_cert)):
        assert name in last, last
