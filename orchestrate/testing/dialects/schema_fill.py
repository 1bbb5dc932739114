"""Answers for side requests that ask for JSON matching a schema (routers, classifiers)."""

from __future__ import annotations

from typing import Any

__all__ = ["fill_schema"]


def fill_schema(schema: Any, depth: int = 0) -> Any:
    """A small value that satisfies ``schema``: first enum value, minimum numbers, empty arrays.
    Type names may be upper case (Gemini's ``STRING``, ``INTEGER``)."""
    if not isinstance(schema, dict) or depth > 6:
        return None
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    kind = str(kind or "").lower()
    if schema.get("enum"):
        return schema["enum"][0]
    if kind == "object" or "properties" in schema:
        return {k: fill_schema(v, depth + 1) for k, v in (schema.get("properties") or {}).items()}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        low = schema.get("minimum", 1)
        return max(int(low), 1) if kind == "integer" else max(float(low), 1.0)
    if kind == "boolean":
        return False
    return "scripted"
