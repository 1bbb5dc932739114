"""Reading loosely-typed JSON from agents: a wrong type is an empty value, never an exception."""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["json_object", "obj", "text"]


def text(value: Any) -> str:
    """``value`` as a string: strings as they are, None as "", anything else through ``str``."""
    return value if isinstance(value, str) else "" if value is None else str(value)


def obj(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def json_object(line: str) -> dict[str, Any] | None:
    """``line`` parsed as a JSON object, or None when it is not JSON or not an object."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
