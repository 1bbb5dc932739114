"""The task engine over the store: a queue with priorities, dependencies and limits, leases and
recovery, and the API a board embeds (:class:`Engine`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
    from .engine import Engine
    from .runner import Watchdogs

__all__ = ["Engine", "Watchdogs"]

# Imported when first asked for (PEP 562): `orchestrate run` records its run with engine/record.py
# alone, on a thread beside the agent's start-up, and the engine's queue, runner and workspaces
# (~150 ms of CPU more than the store itself) would compete with it for the cores.
_WHERE = {"Engine": ".engine", "Watchdogs": ".runner"}

__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals(), __all__)
