"""GPU kernel loader (filled in by the kernel layer)."""

from __future__ import annotations


def available() -> bool:
    return False


def describe() -> dict:
    return {"source": "none (CPU only)"}
