"""The task engine over the store: a queue with priorities, dependencies and limits, leases and
recovery, and the API a board embeds (:class:`Engine`)."""

from __future__ import annotations

from .engine import Engine
from .runner import Watchdogs

__all__ = ["Engine", "Watchdogs"]
