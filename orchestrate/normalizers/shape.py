"""One shape for one meaning, whichever agent: the last step every tool call goes through.

- paths (an action's, a search's, and the ``---``/``+++`` headers of its diffs) are relative to the
  task's working directory (the seed's ``normalizeOutput(stream, workDir)``), absolute only outside it;
- a file action whose every change creates a file is a ``file_write``; any other (an edit, a
  delete, an overwrite) is a ``file_edit``: the same kinds whichever agent made the change.
"""

from __future__ import annotations

from ..entries import (
    ActionType,
    CommandRun,
    FileChange,
    FileEdit,
    FileRead,
    FileWrite,
    GenericTool,
    Search,
    TaskAction,
    ToolUse,
    WebFetch,
)
from .evolve import evolve, make

__all__ = ["PLAIN_ACTIONS", "relative", "shape_action", "shape_content", "shape_tool"]


def relative(path: str, work_dir: str | None) -> str:
    """``path`` relative to ``work_dir`` when it lies inside it (``.`` for the directory itself)."""
    if not work_dir or not path.startswith("/"):
        return path
    root = work_dir.rstrip("/") or "/"
    if path == root:
        return "."
    if path.startswith(root + "/"):
        return path[len(root) + 1 :]
    return path


def _paths(text: str, work_dir: str) -> str:
    """A comma-joined list of paths (Codex's multi-file change), each made relative."""
    return (
        ", ".join(relative(p, work_dir) for p in text.split(", "))
        if ", " in text
        else relative(text, work_dir)
    )


def _diff(diff: str | None, work_dir: str) -> str | None:
    """The diff with its file headers made relative (``a/abs/dir/x`` -> ``a/x``)."""
    inside = work_dir.strip("/") + "/"
    if not diff or inside not in diff:
        return diff
    lines = diff.split("\n")
    for i, line in enumerate(lines):
        if line.startswith(("--- a/", "+++ b/")) and line[6:].startswith(inside):
            lines[i] = line[:6] + line[6 + len(inside) :]
        elif line.startswith(("--- /", "+++ /")) and line[5:].startswith(inside):
            lines[i] = line[:4] + ("a/" if line[0] == "-" else "b/") + line[5 + len(inside) :]
        elif line.startswith("diff --git "):
            lines[i] = line.replace(" a/" + inside, " a/").replace(" b/" + inside, " b/")
    return "\n".join(lines)


PLAIN_ACTIONS = frozenset({CommandRun, GenericTool, WebFetch, TaskAction})
"""The action classes without paths to shape: left as they are at the cost of one set lookup
(``isinstance`` against a pydantic model class that is not the object's own costs about 0.1 µs,
and a tool call is shaped whenever it is added or changed)."""

_PATHED = frozenset({FileRead, FileWrite, FileEdit, Search})
"""The action classes whose one-line content names paths."""


def shape_action(action: ActionType, work_dir: str | None) -> ActionType:
    """``action`` in the one shape (the same object when nothing changes)."""
    # By exact class (entry models have no subclasses), for the cost said above.
    if type(action) in PLAIN_ACTIONS:
        return action
    if type(action) is FileWrite or type(action) is FileEdit:
        return _file(action, work_dir)
    if type(action) is FileRead or type(action) is Search:
        path = action.path
        if not work_dir or not path:
            return action
        shaped = relative(path, work_dir)
        return action if shaped == path else evolve(action, path=shaped)
    return action


def _file(action: FileWrite | FileEdit, work_dir: str | None) -> FileWrite | FileEdit:
    changes = action.changes
    path = action.path
    if work_dir:
        path = _paths(path, work_dir)
        shaped: list[FileChange] | None = None  # (made when a diff changes)
        for i, change in enumerate(changes):
            diff = _diff(change.unified_diff, work_dir)
            if diff is not change.unified_diff:
                if shaped is None:
                    shaped = list(changes)
                shaped[i] = evolve(change, unified_diff=diff)
        # (the same tuple when no diff changed: an action already shaped is then returned as
        # it is, not copied on every update of its call)
        if shaped is not None:
            changes = tuple(shaped)
    creates = True
    for change in changes:
        if change.type != "create":
            creates = False
            break
    cls: type[FileWrite] | type[FileEdit] = FileWrite if creates else FileEdit
    if changes and type(action) is not cls:
        return make(cls, path=path, changes=changes)
    if path != action.path or changes is not action.changes:
        return evolve(action, path=path, changes=changes)
    return action


def shape_tool(type_: ToolUse, work_dir: str | None) -> ToolUse:
    """``type_`` in the one shape (the same object when nothing changes)."""
    tool = type_.tool
    action = shape_action(tool.action, work_dir)
    if action is tool.action:
        return type_
    return evolve(type_, tool=evolve(tool, action=action))


def shape_content(content: str, type_: ToolUse, work_dir: str | None) -> str:
    """A file or search call's one-line content with the working directory's paths made relative
    (the normalizer described the action before its paths were)."""
    if not work_dir:
        return content
    action = type_.tool.action
    if type(action) not in _PATHED:
        return content
    root = work_dir.rstrip("/") + "/"
    return content.replace(root, "") if root in content else content
