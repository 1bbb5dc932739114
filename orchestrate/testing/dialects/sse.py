"""What a dialect needs from the HTTP handler: JSON replies and a chunked SSE stream."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["Responder"]


class Responder(Protocol):
    def json(self, status: int, obj: Any) -> None:
        """Send one JSON response."""

    def start_sse(self) -> None:
        """Send the headers of a chunked ``text/event-stream`` response."""

    def event(self, name: str | None, data: Any) -> None:
        """Send one ``event: name / data: json`` frame (no event line when ``name`` is None; a
        string ``data`` is sent as it is, for ``[DONE]``)."""

    def end_sse(self) -> None:
        """Send the last chunk."""

    def new_id(self, prefix: str) -> str:
        """A fresh id, counted per server so that a re-recorded run gets the same ids."""
