"""The ``unmarked`` chaos configuration's S3 keys: an IAM user that may not write a committed marker.

A restore from a checkpoint without its ``_committed`` marker re-commits everything the checkpoint
holds, and each sink must then decide from its own durable evidence (issue #43). Here MinIO itself
refuses every marker write of the run: the job signs with a fresh IAM user holding MinIO's
``readwrite`` policy and an explicit ``Deny`` of ``s3:PutObject`` on
``<checkpoints>/*/_committed`` (IAM wildcards span ``/``), so markers fail as a storage that
refuses them does, and everything else is written as usual. The reader keeps the root keys.
"""

from __future__ import annotations

import secrets
from urllib.parse import urlsplit

from twophase.integration.services.minio_server import MinioIam
from twophase.integration.services.s3 import S3Endpoint


def refusing_markers(root: S3Endpoint, checkpoint_uri: str) -> S3Endpoint:
    """A new IAM user's endpoint that may do everything but write a ``_committed`` marker under
    ``checkpoint_uri`` (``s3://bucket/prefix``).

    Raises:
        ValueError: ``checkpoint_uri`` is not an ``s3://`` location.
        minio.error.MinioAdminException: MinIO's admin API refused.
    """
    location = urlsplit(checkpoint_uri)
    if location.scheme != "s3" or not location.netloc:
        raise ValueError(f"the unmarked configuration needs s3:// checkpoints, got {checkpoint_uri!r}")
    user = f"unmarked-{secrets.token_hex(6)}"
    iam = MinioIam(root)
    endpoint = iam.add_user(user, secrets.token_hex(20))
    prefix = location.path.strip("/")
    iam.deny(
        user, ["s3:PutObject"], [f"arn:aws:s3:::{location.netloc}/{prefix}/*/_committed"], f"deny-{user}"
    )
    return endpoint
