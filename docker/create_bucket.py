"""Create the deployment's buckets on the S3-compatible store (the create-bucket service).

    python create_bucket.py BUCKET [BUCKET ...]

Reads the S3 settings feedpipe reads: ``FEEDPIPE_S3_ENDPOINT`` (or ``AWS_ENDPOINT_URL``),
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and ``AWS_REGION``. Waits for the endpoint to
answer, creates each bucket that does not exist yet and leaves existing ones alone, so running it
again is harmless.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError

ATTEMPTS = 30
PAUSE_SECONDS = 2.0


def ensure_bucket(s3: Any, bucket: str, region: str) -> str:
    """Create ``bucket`` unless it exists; returns what was done."""
    try:
        s3.head_bucket(Bucket=bucket)
        return "exists"
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket", "NotFound"):
            raise
    if region == "us-east-1":
        s3.create_bucket(Bucket=bucket)
    else:
        s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": region})
    return "created"


def main(buckets: list[str]) -> int:
    if not buckets:
        print(__doc__, file=sys.stderr)
        return 2
    endpoint = os.environ.get("FEEDPIPE_S3_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL")
    region = os.environ.get("AWS_REGION") or "us-east-1"
    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=region,
        config=Config(s3={"addressing_style": "path"}),  # as Spark's S3A uses it
    )
    for bucket in buckets:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                print(f"bucket {bucket}: {ensure_bucket(s3, bucket, region)}", flush=True)
                break
            except EndpointConnectionError:
                if attempt == ATTEMPTS:
                    raise
                time.sleep(PAUSE_SECONDS)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
