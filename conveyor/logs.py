"""One log format for Conveyor's lines and its libraries' (uvicorn's among them): text for
people, or one JSON object a line for log collectors."""

from __future__ import annotations

import json
import logging
import time

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")
TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """`{"time", "level", "logger", "message"}` (and `exception` with its traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def setup(level: str = "info", fmt: str = "text") -> None:
    """Route every logger to standard error in one format, at `level`."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
    # the PostgreSQL pool logs every failed reconnection attempt; the store logs an outage
    # once, and its end
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
