"""Stores: one module per store, each implementing `Backend`."""

from .base import Backend

__all__ = ["Backend"]
