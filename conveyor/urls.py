"""Store URLs: a scheme table with lazy imports, so a store's driver loads only when used."""

from __future__ import annotations

import importlib
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from .backends.base import Backend
from .clock import SYSTEM_CLOCK, Clock
from .exceptions import InvalidInput

DEFAULT_URL = "sqlite:///./conveyor.db"

# scheme -> (module, class, extra that installs its driver)
SCHEMES: dict[str, tuple[str, str, str | None]] = {
    "memory": ("conveyor.backends.memory", "MemoryBackend", None),
    "sqlite": ("conveyor.backends.sqlite", "SQLiteBackend", None),
    "postgresql": ("conveyor.backends.postgres", "PostgresBackend", "postgres"),
    "postgres": ("conveyor.backends.postgres", "PostgresBackend", "postgres"),
    "mysql": ("conveyor.backends.mysql", "MySQLBackend", "mysql"),
    "mariadb": ("conveyor.backends.mysql", "MySQLBackend", "mysql"),
    "redis": ("conveyor.backends.redis", "RedisBackend", "redis"),
    "dynamodb": ("conveyor.backends.dynamodb", "DynamoDBBackend", "aws"),
    "sqs": ("conveyor.backends.sqs", "SQSBackend", "aws"),
}


def redact(url: str) -> str:
    """The URL without its password, for logs and error messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def open_backend(url: str | None = None, *, clock: Clock = SYSTEM_CLOCK) -> Backend:
    """Build the store a URL names (``memory://``, ``sqlite:///file.db``, ...)."""
    url = url or DEFAULT_URL
    if "://" not in url:
        raise InvalidInput(
            f"store URL {redact(url)!r} has no scheme: use one of"
            f" {', '.join(sorted(SCHEMES))} (for example {DEFAULT_URL})"
        )
    scheme, rest = url.split("://", 1)
    entry = SCHEMES.get(scheme.lower())
    if entry is None:
        raise InvalidInput(
            f"unknown store scheme {scheme!r} in {redact(url)!r}: use one of"
            f" {', '.join(sorted(SCHEMES))}"
        )
    module_name, class_name, extra = entry
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("conveyor"):
            raise InvalidInput(
                f"cannot use store {redact(url)}: the {scheme} store is not available in this"
                " version"
            ) from exc
        hint = f": pip install 'conveyor-mq[{extra}]'" if extra else ""
        raise InvalidInput(
            f"cannot use store {redact(url)}: the {scheme} store needs {exc.name}{hint}"
        ) from exc
    cls: type[Backend] = getattr(module, class_name)
    path, _, query = rest.partition("?")
    params = dict(parse_qsl(query))
    return cls.from_url(path, params, clock=clock)
