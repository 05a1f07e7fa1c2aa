"""The read-only listing of what a job's S3 sink left behind (``twophase lingering``).

Pending multipart uploads of this job's and sink's data keys under the sink's prefix, and tail
objects under ``<prefix>/_twophase/<token>/tails/``, by the rules of the sink's own
``abort_lingering``, changing nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twophase.connectors.s3.declaration import DECLARATION
from twophase.sinks.context import LingeringScope
from twophase.sinks.listing import LingeringItem, SinkLingering, sorted_items

if TYPE_CHECKING:
    from twophase.connectors.s3.sink import S3Sink


def list_lingering(sink: S3Sink, scope: LingeringScope[Any]) -> SinkLingering:
    """Pending uploads and tail objects of the job's S3 sink.

    Raises:
        ServiceUnavailableError / ConfigError: S3 keeps failing or access is denied.
        CommittableDecodeError: a held in-progress state cannot be decoded.
    """
    from twophase.connectors.s3.internal import lingering, naming
    from twophase.connectors.s3.internal.uploads import S3Ops, cached_client

    ops = S3Ops(cached_client(sink.config), sink.config)
    held = lingering.held_objects(scope)
    token = naming.job_token(scope.job_id, scope.sink_name)
    prefix = ops.config.prefix
    items: list[LingeringItem] = []
    for upload in ops.list_uploads():
        parsed = naming.parse_data_key(prefix, upload.key)
        if parsed is not None and parsed.token == token:
            items.append(
                LingeringItem.of(
                    upload.key, upload.upload_id in held.upload_ids, f"upload {upload.upload_id}"
                )
            )
    for key in ops.list_keys(naming.tails_root(prefix, token)):
        if naming.parse_tail_key(prefix, token, key) is not None:
            items.append(LingeringItem.of(key, key in held.tail_keys, "tail object"))
    where = f"s3://{ops.bucket}/{prefix}" if prefix else f"s3://{ops.bucket}"
    return SinkLingering(
        scope.sink_name,
        DECLARATION.kind,
        "pending uploads and tails",
        sorted_items(items),
        detail=f"under {where}",
    )
