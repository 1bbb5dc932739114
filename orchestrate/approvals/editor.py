"""`e` at the approval question: the proposed input opened in the person's editor, to approve a
changed version (the mini-agent seed's "modify with editor").

Offered only where the agent runs the tool with the input the approval gives back
(``ApprovalRequest.editable``: Claude's ``updatedInput``); elsewhere a changed input would be
silently dropped, so it is not offered.  What is edited is the part a person would change: a shell
command as plain text, a new file's content, an edit's new text; anything else as the tool's JSON
input.  The file is private (``mkstemp``: 0600, in $TMPDIR) and removed afterwards, whatever happens.

Nothing is approved unless the editor exits 0 and leaves a changed, non-empty, readable version:
otherwise the person is told why and asked again.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import tempfile
import termios
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

import anyio

from .base import ApprovalRequest

__all__ = ["EditRefused", "Editable", "editable", "run_editor"]

MAX_EDITED_BYTES = 1 << 20  # what is read back from the file; an input larger than this is refused
_KILL_GRACE = 2.0


class EditRefused(Exception):
    """The edit gives nothing to approve; the message says why, for the person."""


@dataclass(frozen=True)
class Editable:
    """The text a person edits for ``request``, and how to put the edited text back."""

    field: str | None  # the key of the tool input edited as plain text; None: the whole input as JSON
    text: str
    suffix: str  # of the temporary file, so the editor highlights it as what it is

    def apply(self, request: ApprovalRequest, edited: str) -> dict[str, Any]:
        """The tool input with ``edited`` in place.  Raises :class:`EditRefused` when it is empty,
        unchanged, or (as JSON) not an object."""
        if not edited.strip():
            raise EditRefused("the file was left empty")
        if self.field is None:
            try:
                value = json.loads(edited)
            except ValueError as exc:
                raise EditRefused(f"not valid JSON ({exc})") from None
            if not isinstance(value, dict):
                raise EditRefused("the input must stay a JSON object")
            if value == request.tool_input:
                raise EditRefused("nothing was changed")
            return value
        if self.field == "command":
            edited = edited.rstrip("\n")  # the newline every editor ends a file with is not the command's
        elif not self.text.endswith("\n") and edited.endswith("\n") and not edited.endswith("\n\n"):
            edited = edited[:-1]  # nor a file content's, when the proposed one had none
        if edited == self.text:
            raise EditRefused("nothing was changed")
        args = request.tool_input if isinstance(request.tool_input, dict) else {}
        return {**args, self.field: edited}


def editable(request: ApprovalRequest) -> Editable:
    """What to open in the editor for ``request``."""
    args = request.tool_input if isinstance(request.tool_input, dict) else {}
    path = args.get("file_path") or args.get("path")
    suffix = PurePath(path).suffix if isinstance(path, str) and PurePath(path).suffix else ".txt"
    if request.command is not None and isinstance(args.get("command"), str):
        return Editable("command", args["command"], ".sh")
    if isinstance(args.get("content"), str):
        return Editable("content", args["content"], suffix)
    if isinstance(args.get("new_string"), str) and "edits" not in args:
        return Editable("new_string", args["new_string"], suffix)
    return Editable(None, json.dumps(request.tool_input, indent=2, ensure_ascii=False) + "\n", ".json")


def editor_command() -> list[str]:
    """$VISUAL, else $EDITOR (either may hold arguments: ``code --wait``), else ``vi``."""
    chosen = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    try:
        argv = shlex.split(chosen)
    except ValueError:
        argv = [chosen]
    return argv or ["vi"]


async def run_editor(text: str, suffix: str, fd_in: int, fd_out: int) -> str:
    """``text`` edited by the person on the terminal ``fd_in``/``fd_out``; the edited text.

    Raises :class:`EditRefused` if the editor cannot start, exits non-zero, or leaves a file too
    large or unreadable.  Cancelled (the question withdrawn, Ctrl-C), the editor is stopped.  The
    terminal's settings are put back as they were, whatever the editor left them in."""
    argv = editor_command()
    saved = _attributes(fd_in)
    try:
        with _scratch_file(text, suffix) as path:
            try:
                process = await anyio.open_process(
                    [*argv, str(path)], stdin=fd_in, stdout=fd_out, stderr=fd_out
                )
            except OSError as exc:
                raise EditRefused(f"could not start the editor {argv[0]!r} ({exc.strerror or exc})") from None
            try:
                code = await process.wait()
            finally:
                if process.returncode is None:  # cancelled while the person was editing
                    with anyio.CancelScope(shield=True), contextlib.suppress(OSError):
                        process.kill()
                        with anyio.move_on_after(_KILL_GRACE):
                            await process.wait()
            if code != 0:
                raise EditRefused(f"the editor exited with code {code}")
            return _read_back(path)
    finally:
        _restore(fd_in, saved)


@contextlib.contextmanager
def _scratch_file(text: str, suffix: str) -> Iterator[Path]:
    """``text`` in a new private file (``mkstemp``: 0600, only we can read it), removed at the end."""
    fd, name = tempfile.mkstemp(prefix="orchestrate-approval-", suffix=suffix)
    path = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
        yield path
    finally:
        path.unlink(missing_ok=True)


def _read_back(path: Path) -> str:
    """The edited file, bounded (a local file of at most MAX_EDITED_BYTES: read in one go)."""
    try:
        with path.open("rb") as file:
            data = file.read(MAX_EDITED_BYTES + 1)
    except OSError as exc:
        raise EditRefused(f"could not read the edited file ({exc.strerror or exc})") from None
    if len(data) > MAX_EDITED_BYTES:
        raise EditRefused(f"the edited input is larger than {MAX_EDITED_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise EditRefused("the edited file is not UTF-8 text") from None


def _attributes(fd: int) -> list[Any] | None:
    try:
        return termios.tcgetattr(fd)
    except termios.error:
        return None  # not a terminal (pipes, in tests): nothing to put back


def _restore(fd: int, saved: list[Any] | None) -> None:
    if saved is not None:
        with contextlib.suppress(termios.error):
            termios.tcsetattr(fd, termios.TCSANOW, saved)
