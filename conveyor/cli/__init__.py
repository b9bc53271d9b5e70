"""The `conveyor` command line and its interactive shell."""

from __future__ import annotations

from .app import cli


def main() -> None:
    cli(prog_name="conveyor")


__all__ = ["cli", "main"]
