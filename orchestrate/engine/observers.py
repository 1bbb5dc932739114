"""Observer hooks (the ch4p seed's observer): a board or a metrics exporter learns when runs start and
end, when tool calls change status, and when approvals are asked and answered.

An observer is any object with some of these methods (all synchronous, called on the engine's event
loop, so they must be quick: hand slow work to a queue):

- ``on_run_start(task, run)``
- ``on_run_end(task, run, end, task_status)``: ``end`` the run's stored columns, ``task_status`` what the
  task went to (``done``, ``queued`` for a retry or a follow-up, ``failed`` ...)
- ``on_tool_call(task, run, entry)``: a tool call entry whose status changed (``created`` ... ``success``)
- ``on_approval(task, run, entry, phase)``: ``phase`` ``asked`` (the entry is ``pending_approval``) or
  ``answered`` (its ``tool.approval`` says how)

Cheap when unused: the hooks are looked up once, when the engine is made, and a run with no observer
for tool calls or approvals does no per-entry work for them.  An observer that raises is reported (as a
logged warning, once per observer and hook) and never stops a run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ..entries import NormalizedEntry
from ..store import RunEnd, RunRecord, TaskRecord

__all__ = ["HOOKS", "Observers"]

_log = logging.getLogger("orchestrate.engine")

HOOKS = ("on_run_start", "on_run_end", "on_tool_call", "on_approval")


class Observers:
    """The observers' hooks, grouped by hook; ``bool(observers.tool_call)`` is the cheap check."""

    def __init__(self, observers: Sequence[Any] = ()) -> None:
        self.run_start = [h for o in observers if (h := getattr(o, "on_run_start", None))]
        self.run_end = [h for o in observers if (h := getattr(o, "on_run_end", None))]
        self.tool_call = [h for o in observers if (h := getattr(o, "on_tool_call", None))]
        self.approval = [h for o in observers if (h := getattr(o, "on_approval", None))]
        self.per_entry = bool(self.tool_call or self.approval)
        self._warned: set[Any] = set()

    def started(self, task: TaskRecord, run: RunRecord) -> None:
        self._call(self.run_start, task, run)

    def ended(self, task: TaskRecord, run: RunRecord, end: RunEnd, task_status: str) -> None:
        self._call(self.run_end, task, run, end, task_status)

    def tool(self, task: TaskRecord, run: RunRecord, entry: NormalizedEntry) -> None:
        self._call(self.tool_call, task, run, entry)

    def asked(self, task: TaskRecord, run: RunRecord, entry: NormalizedEntry, phase: str) -> None:
        self._call(self.approval, task, run, entry, phase)

    def _call(self, hooks: list[Any], *args: Any) -> None:
        for hook in hooks:
            try:
                hook(*args)
            except Exception as exc:  # an observer never stops a run
                if hook not in self._warned:
                    self._warned.add(hook)
                    _log.warning("observer %r failed: %r", hook, exc)
