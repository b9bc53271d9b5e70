"""Store URLs: a scheme table with lazy imports, so a store's driver loads only when used.

Each store module has a ``from_url(rest, params, *, clock)`` that builds the store from the
part of its URL after ``scheme://`` and its query; building it opens nothing.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from .backends.base import Backend
from .clock import SYSTEM_CLOCK, Clock
from .exceptions import InvalidInput, Unsupported

DEFAULT_URL = "sqlite:///./conveyor.db"

# scheme -> (module with `from_url`, extra that installs its driver)
SCHEMES: dict[str, tuple[str, str | None]] = {
    "memory": ("conveyor.backends.memory", None),
    "sqlite": ("conveyor.backends.sql.sqlite", None),
    "postgresql": ("conveyor.backends.sql.postgres", "postgres"),
    "postgres": ("conveyor.backends.sql.postgres", "postgres"),
    "mysql": ("conveyor.backends.sql.mysql", "mysql"),
    "mariadb": ("conveyor.backends.sql.mysql", "mysql"),
    "redis": ("conveyor.backends.redis", "redis"),
    "rediss": ("conveyor.backends.redis", "redis"),
    "dynamodb": ("conveyor.backends.dynamodb", "aws"),
    "sqs": ("conveyor.backends.sqs", "aws"),
}

Factory = Callable[..., Backend]


def check_options(scheme: str, params: dict[str, str], known: tuple[str, ...]) -> None:
    """Refuse options a store does not take, naming those it does."""
    unknown = set(params) - set(known)
    if unknown:
        raise InvalidInput(
            f"unknown {scheme} store option(s) {', '.join(sorted(unknown))}: use"
            f" {', '.join(known[:-1])} or {known[-1]}"
        )


def redact(url: str) -> str:
    """The URL without its password, for logs and error messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def described(url: str) -> str:
    """The URL as logs should show it: no password, a SQLite file's path made absolute."""
    if url.startswith("sqlite://"):
        rest, sep, query = url[len("sqlite://") :].partition("?")
        path = rest[1:] if rest.startswith("/") else rest
        if path and path != ":memory:":
            return f"sqlite:///{os.path.abspath(path)}{sep}{query}"
    return redact(url)


def _store_module(url: str) -> tuple[str, str, dict[str, str], Any]:
    """The scheme of a store URL, the rest of it, its options, and its store's module (or
    InvalidInput saying what is wrong, or which extra to install)."""
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
    module_name, extra = entry
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if extra is None:
            raise
        from .extras import missing

        raise InvalidInput(
            f"cannot use store {redact(url)}: " + missing(extra, f"the {scheme} store", exc.name)
        ) from exc
    path, _, query = rest.partition("?")
    return scheme, path, dict(parse_qsl(query)), module


def backup_store(url: str, dest: str) -> int:
    """Back the store up to `dest` while it is in use, where the store has its own way
    (SQLite's online backup); bytes written. Unsupported for the others."""
    scheme, path, params, module = _store_module(url)
    fn = getattr(module, "backup", None)
    if fn is None:
        raise Unsupported(
            f"the {scheme} store is backed up with its database's own tools, not by Conveyor:"
            " see docs/deploy.md (Backups)"
        )
    return int(fn(path, params, dest))


def restore_store(url: str, source: str, *, replace: bool = False) -> int:
    """Put a backup made by `backup_store` back as the store's data; bytes written."""
    scheme, path, params, module = _store_module(url)
    fn = getattr(module, "restore", None)
    if fn is None:
        raise Unsupported(
            f"the {scheme} store is restored with its database's own tools: see docs/deploy.md"
        )
    return int(fn(path, params, source, replace=replace))


def open_backend(url: str | None = None, *, clock: Clock = SYSTEM_CLOCK) -> Backend:
    """Build the store a URL names (``memory://``, ``sqlite:///file.db``, ...)."""
    url = url or DEFAULT_URL
    scheme, path, params, module = _store_module(url)
    factory: Factory = module.from_tls_url if scheme.lower() == "rediss" else module.from_url
    return factory(path, params, clock=clock)
