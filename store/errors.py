"""Errors raised by the store (user-facing: they name the path and the problem)."""

from __future__ import annotations


class StoreError(Exception):
    """A store directory that cannot be used: not ours, corrupt, locked, or configured differently."""
