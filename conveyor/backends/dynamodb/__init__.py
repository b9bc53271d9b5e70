"""DynamoDB store: ``dynamodb://TABLE?region=R&endpoint_url=URL``, on boto3.

One table holds every queue, topic and consumer; it is created on first use (or by
``conveyor migrate``) with on-demand capacity. Options (URL query), after DynamoMQ's flags:
``region`` (default ``AWS_DEFAULT_REGION`` or us-east-1), ``endpoint_url`` (DynamoDB Local,
moto, ...; ``--endpoint-url``), ``index`` (the name of DynamoMQ's queueing index,
``--index-name``/``--queueing-index-name``; default DynamoMQ's), ``poll_interval`` (the
longest pause between a long poll's attempts, default 1 s). The table name defaults to
DynamoMQ's, ``dynamo-mq-table`` (``--table-name``). Credentials come from boto3's usual
chain (environment, profile, instance role).

An existing DynamoMQ table opens as it is: its standard queue and its dead-letter queue are
the queues ``STANDARD`` and ``DLQ``. See docs/stores.md for the item layout.
"""

from __future__ import annotations

import os
import re

from ...clock import Clock
from ...exceptions import InvalidInput
from ...urls import check_options
from .store import DynamoStore
from .table import DYNAMOMQ_INDEX, Table

__all__ = ["DynamoStore", "from_url"]

DEFAULT_TABLE = "dynamo-mq-table"
OPTIONS = ("region", "endpoint_url", "index", "poll_interval")
_TABLE_NAME = re.compile(r"[A-Za-z0-9_.-]{3,255}")


def from_url(rest: str, params: dict[str, str], *, clock: Clock) -> DynamoStore:
    check_options("dynamodb", params, OPTIONS)
    table = rest.strip("/") or DEFAULT_TABLE
    if not _TABLE_NAME.fullmatch(table):
        raise InvalidInput(
            f"DynamoDB table name {table!r} is not valid: use 3 to 255 letters, digits, '_',"
            " '-' or '.' (dynamodb://my-table?region=eu-west-1)"
        )
    index = params.get("index", DYNAMOMQ_INDEX)
    if not _TABLE_NAME.fullmatch(index):
        raise InvalidInput(f"DynamoDB index name {index!r} is not valid: 3 to 255 characters")
    try:
        poll_interval = float(params.get("poll_interval", 1.0))
    except ValueError:
        raise InvalidInput("poll_interval must be a number of seconds") from None
    if not 0 < poll_interval <= 600:
        raise InvalidInput(f"poll_interval must be from 0 to 600 seconds, got {poll_interval}")
    region = params.get("region") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    endpoint = params.get("endpoint_url") or None
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        raise InvalidInput(
            f"endpoint_url {endpoint!r} must be an http:// or https:// URL"
            " (for example http://127.0.0.1:8000)"
        )
    return DynamoStore(
        Table(table, region=region, endpoint_url=endpoint, index=index),
        clock=clock,
        poll_interval=poll_interval,
    )
