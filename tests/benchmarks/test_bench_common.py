"""The benchmarks' shared helpers that need no Spark or services."""

from __future__ import annotations

from support.bench_modules import ROOT, load_benchmark
from support.s3_model import S3Model

common = load_benchmark("bench_common", ROOT / "benchmarks" / "common.py")


def test_pending_uploads_are_counted_under_the_prefix_from_the_bucket_s_listing() -> None:
    """MinIO matches ListMultipartUploads' Prefix only as an exact key, so a check that passed one
    could never find an upload: the helper lists the bucket and filters by prefix."""
    s3 = S3Model()
    for key in ("run-1/part-0.parquet", "run-1/day=2/part-1.parquet", "run-10/part-0.parquet", "x/run-1/p"):
        s3.create_multipart_upload(Bucket="bucket", Key=key)
    assert common.pending_uploads(s3, "bucket", "run-1/") == 2
    assert common.pending_uploads(s3, "bucket", "none/") == 0
