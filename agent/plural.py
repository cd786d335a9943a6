"""Counted nouns in messages and reports: `counted(1, "GPU")` is "1 GPU", `counted(8, "GPU")`
"8 GPUs" (never "1 GPUs")."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`count` and the noun, singular for exactly 1; `plural` when adding "s" is wrong."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"
