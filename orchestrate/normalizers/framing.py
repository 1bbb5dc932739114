"""The line framer now lives in the wire layer (:mod:`orchestrate.wire.framing`); kept here so
existing imports keep working."""

from __future__ import annotations

from ..wire.framing import DEFAULT_MAX_LINE_BYTES, FramedLine, LineFramer, LineTooLong

__all__ = ["DEFAULT_MAX_LINE_BYTES", "FramedLine", "LineFramer", "LineTooLong"]
