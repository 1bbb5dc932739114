"""Reading loosely-typed JSON from agents: a wrong type is an empty value, never an exception."""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["count", "json_object", "obj", "rpc_id", "text"]


def text(value: Any) -> str:
    """``value`` as a string: strings as they are, None as "", anything else through ``str``."""
    return value if isinstance(value, str) else "" if value is None else str(value)


def obj(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def count(value: Any) -> int:
    """``value`` as a count (tokens, bytes): an integer as it is, an integral float or a decimal
    string converted, anything else 0."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return 0


def rpc_id(value: Any) -> int | str | None:
    """``value`` as a JSON-RPC id: a string or an integer; None for anything else (a list, an
    object, a fraction, a boolean, null), which no answer can be matched to."""
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return None


def json_object(line: str) -> dict[str, Any] | None:
    """``line`` parsed as a JSON object, or None when it is not JSON or not an object."""
    if not line.lstrip().startswith("{"):
        return None  # not an object whatever follows; and a failed parse costs an exception
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
