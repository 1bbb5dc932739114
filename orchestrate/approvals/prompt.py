"""Ask a person at the terminal.

One terminal for the whole run: ``/dev/tty`` (or stdin, when that is a terminal and ``/dev/tty`` is
not there), opened once and closed by :meth:`TerminalPrompt.close`.  It is read only while a
question is open, in the asking task itself (``anyio.wait_readable``, then a read that cannot
block), so nothing reads behind a question's back: no thread outlives a question, and a question
that is taken back (the agent withdrew it, it timed out, the run ended) stops reading at once and
says so on screen.  What a person typed before a question was shown, or for a question that was
taken back, is thrown away when the next one is shown: an answer is only ever taken for the
question on the screen.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import termios
from collections.abc import Callable
from typing import Any

import anyio

from ..errors import ConfigError
from .base import ApprovalDecision, ApprovalRequest

# The question's display, the editor and the scopes are imported when a question is asked: every
# `orchestrate run` makes a prompt before it starts its agent, and most never ask anything.

__all__ = ["NOBODY", "NoTerminalError", "TerminalPrompt"]

# The answers, on one line of a 100-column terminal; what [a] covers is said on the line after.
_YES = "[y] yes  "
_EDIT = "[e] edit, then yes  "
_REST = "[a] yes, this session  [n] no  [i] no, and stop the turn"
_MAX_LINE = 4096  # an answer is a word; longer input is kept to this much
_MAX_MESSAGE = 1 << 16  # a message typed to the agent in a conversation
NOBODY = "nobody could answer"
"""How the reason of a refusal for want of a person begins (the CLI exits non-zero on it)."""


_BACKGROUND_POLL = 0.2  # seconds between looks at whether we are the terminal's foreground job


class NoTerminalError(ConfigError):
    """There is no terminal to ask on."""


class _Terminal:
    """The input and output descriptors, and the bytes read past the last answer."""

    def __init__(
        self, fd_in: int, fd_out: int, owned: tuple[int, ...], foreground: Callable[[], bool] | None = None
    ) -> None:
        self.fd_in, self.fd_out, self.owned = fd_in, fd_out, owned
        self.is_tty = os.isatty(fd_in)
        self.pending = b""
        self.limit = _MAX_LINE  # bytes of a line kept (its end)
        self.gone = False  # end of input for good (a pipe's end, a hung-up terminal)
        self.foreground = foreground
        self._discard_later = False

    def discard_typed_ahead(self) -> None:
        """Throw away input nobody asked for yet: a terminal's queue, and whatever a pipe holds.
        Not while we are in the background (see :meth:`line`): that input is the shell's."""
        if self.foreground is not None and not self.foreground():
            self._discard_later = True
            return
        self._discard_later = False
        if self.is_tty:
            with contextlib.suppress(termios.error):
                termios.tcflush(self.fd_in, termios.TCIFLUSH)
        while not self.gone and _ready(self.fd_in) and self._read() is not None:
            pass
        self.pending = b""

    async def line(self) -> str | None:
        """The next line typed; None at the end of input.

        With ``foreground`` (a run of ``orchestrate warm``, in a session of its own, asking on the
        command's terminal): nothing is read while the command is not the terminal's foreground job
        (``orchestrate run ... &``, or Ctrl-Z then ``bg``), as a process of the terminal's own session
        would be stopped by the read (SIGTTIN): what is typed then is the shell's, never an answer."""
        if self.foreground is not None:
            while not self.foreground():  # noqa: ASYNC110  (no event says a job came to the fore)
                await anyio.sleep(_BACKGROUND_POLL)
            if self._discard_later:
                self.discard_typed_ahead()
        while b"\n" not in self.pending:
            if self.gone:
                return None
            with contextlib.suppress(OSError):  # a regular file cannot be waited on; it is always ready
                await anyio.wait_readable(self.fd_in)
            if self._read() == b"" and not self.gone:
                return None  # Ctrl-D at a terminal: no answer this time
        line, _, self.pending = self.pending.partition(b"\n")
        return line.decode("utf-8", "replace").strip()

    def _read(self) -> bytes | None:
        """What one read gave: b"" at the end of input, None if there was nothing to read yet."""
        try:
            data = os.read(self.fd_in, _MAX_LINE)
        except BlockingIOError:
            return None
        except OSError:  # EIO: the terminal hung up
            data = b""
        if not data:
            # A terminal's end of input is Ctrl-D, which ends one line, not the terminal.
            self.gone = not self.is_tty or _hung_up(self.fd_in)
        self.pending = (self.pending + data)[-self.limit :]
        return data

    def write(self, text: str) -> None:
        data = text.encode("utf-8", "replace")
        try:
            while data:
                data = data[os.write(self.fd_out, data) :]
        except OSError as exc:  # the terminal is gone; there is nobody to show it to
            if exc.errno not in (errno.EIO, errno.EPIPE, errno.EBADF, errno.EAGAIN):
                raise

    def close(self) -> None:
        for fd in self.owned:
            with contextlib.suppress(OSError):
                os.close(fd)


def _events(fd: int) -> int:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return sum(e for _, e in poller.poll(0))


def _ready(fd: int) -> bool:
    return bool(_events(fd) & (select.POLLIN | select.POLLHUP))


def _hung_up(fd: int) -> bool:
    return bool(_events(fd) & (select.POLLHUP | select.POLLERR | select.POLLNVAL))


class TerminalPrompt:
    """Shows each request (escaped: see :mod:`.display`) and reads the answer, one question at a time.

    ``input``/``output``: file descriptors to use instead of the terminal (a pty or pipes, in tests);
    they are not closed.  A question refused because nobody could answer (no terminal, its input
    ended) is counted in :attr:`unanswered`, and its reason begins with :data:`NOBODY`.
    """

    def __init__(
        self,
        input: int | None = None,
        output: int | None = None,
        foreground: Callable[[], bool] | None = None,
    ) -> None:
        self._given = (input, output)
        self._foreground = foreground
        self._terminal: _Terminal | None = None
        self._lock = anyio.Lock()  # one question on screen at a time
        self._open: anyio.CancelScope | None = None
        self._stopped = False
        self._closed = False
        self.unanswered = 0
        """Questions refused because nobody could answer them."""

    def open(self) -> None:
        """Open the terminal now (it is opened on the first question otherwise).

        Raises :class:`NoTerminalError` if there is none: no ``/dev/tty`` and stdin is no terminal."""
        if self._terminal is not None:
            return
        fd_in, fd_out = self._given
        if fd_in is not None:
            self._terminal = _Terminal(fd_in, fd_out if fd_out is not None else fd_in, (), self._foreground)
            return
        try:
            tty = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError:
            if not os.isatty(0):
                raise NoTerminalError("no /dev/tty, and stdin is not a terminal") from None
            self._terminal = _Terminal(0, 2 if os.isatty(2) else 1, ())
            return
        self._terminal = _Terminal(tty, tty, (tty,))

    def close(self) -> None:
        """Give the terminal back; later questions are refused for want of a person.  A question
        still open is closed first, and the terminal with it once its task has stopped waiting on it
        (closing a descriptor a task still waits on would break the event loop's bookkeeping)."""
        self._closed = True
        if self._open is not None:
            self._open.cancel()
        elif self._terminal is not None:
            self._terminal.close()
            self._terminal = None

    def interrupt(self) -> bool:
        """Ctrl-C while a question is open: it is answered "no, and stop the turn".  True if one was."""
        if self._open is None:
            return False
        self._stopped = True
        self._open.cancel()
        return True

    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        async with self._lock:
            if self._closed:
                return self._nobody("the prompt was closed")
            try:
                self.open()
            except NoTerminalError as exc:
                return self._nobody(str(exc))
            assert self._terminal is not None
            if self._terminal.gone:
                return self._nobody("the terminal's input has ended")
            return await self._ask(self._terminal, request)

    async def read_line(self, prompt: str, limit: int = _MAX_MESSAGE) -> str | None:
        """A line typed at ``prompt`` on the same terminal (a conversation's next message; at most
        ``limit`` bytes, its end kept).  None at the end of input (Ctrl-D), when the prompt is
        closed, or when :meth:`interrupt` takes the line back (Ctrl-C).  Raises
        :class:`NoTerminalError` if there is no terminal."""
        async with self._lock:
            if self._closed:
                return None
            self.open()
            term = self._terminal
            assert term is not None
            if term.gone:
                return None
            term.write(prompt)
            line = None
            term.limit = limit
            try:
                with anyio.CancelScope() as self._open:
                    line = await term.line()
            finally:
                term.limit = _MAX_LINE
                self._open = None
                if self._closed:
                    self.close()
            if line is None:
                term.write("\n")
            return line

    def _nobody(self, why: str) -> ApprovalDecision:
        self.unanswered += 1
        return ApprovalDecision.deny(f"{NOBODY}: {why}")

    async def _ask(self, term: _Terminal, request: ApprovalRequest) -> ApprovalDecision:
        term.discard_typed_ahead()
        from .display import question_lines

        question = "\n".join(question_lines(request))
        term.write(f"\n{question}\n  {_help(request)}\n{_always_line(request)}")
        self._stopped = False
        decision: ApprovalDecision | None = None
        try:
            with anyio.CancelScope() as self._open:
                decision = await self._converse(term, request)
            if decision is None and self._stopped:  # interrupt(): Ctrl-C while it was open
                self._say(term, "stopped (Ctrl-C): no, and the turn stops")
                decision = ApprovalDecision.deny("stopped by the user (Ctrl-C)", interrupt=True)
            elif decision is None:  # close()
                self._say(term, "closed: the prompt was closed before an answer")
                decision = self._nobody("the prompt was closed")
        except anyio.get_cancelled_exc_class():
            self._say(term, "closed without an answer: withdrawn, timed out or the run ended")
            raise
        finally:
            self._open = None
            if self._closed:  # close() came while this question was open: now the fd is free
                self.close()
        return decision

    async def _converse(self, term: _Terminal, request: ApprovalRequest) -> ApprovalDecision:
        from .display import escape

        while True:
            term.write("  > ")
            line = await term.line()
            if line is None:
                term.write("\n")
                if term.gone:
                    return self._nobody("the terminal's input ended")
                return ApprovalDecision.deny("no answer (end of input)")
            answer = line.lower()
            if answer in ("y", "yes"):
                return ApprovalDecision.approve()
            if answer in ("a", "always"):
                return ApprovalDecision.approve(for_session=True)
            if answer in ("n", "no", "i"):
                term.write("  reason (optional): ")
                reason = await term.line()
                return ApprovalDecision.deny(reason or "denied by the user", interrupt=answer == "i")
            if answer in ("e", "edit") and request.editable:
                changed = await self._edit(term, request)
                if changed is not None:
                    return ApprovalDecision.approve(changed)
                continue
            if answer:
                term.write(f"  {escape(line)[:40]!s}? please answer one of: {_help(request)}\n")

    async def _edit(self, term: _Terminal, request: ApprovalRequest) -> dict[str, Any] | None:
        """The input changed in the person's editor, shown back; None (said why) if nothing is to be
        approved: the editor failed, or left the input empty, unchanged or unreadable."""
        from .display import block, escape
        from .editor import EditRefused, editable, run_editor

        part = editable(request)
        try:
            edited = await run_editor(part.text, part.suffix, term.fd_in, term.fd_out)
            changed = part.apply(request, edited)
        except EditRefused as exc:
            term.write(f"  nothing approved: {escape(str(exc))}; answer again\n")
            return None
        finally:
            term.discard_typed_ahead()  # keys meant for the editor are no answer
        shown = changed.get(part.field) if part.field is not None else changed
        text = shown if isinstance(shown, str) else json.dumps(shown, indent=2, ensure_ascii=False)
        term.write("\n".join(["  approved as you changed it:", *block(text)]) + "\n")
        return changed

    def _say(self, term: _Terminal, what: str) -> None:
        # Clear the half-written answer line, then say what became of the question.
        term.write(("\r\x1b[2K" if os.isatty(term.fd_out) else "\n") + f"  ({what})\n")


def _help(request: ApprovalRequest) -> str:
    return _YES + (_EDIT if request.editable else "") + _REST


def _always_line(request: ApprovalRequest) -> str:
    """What ``a`` would approve from now on, said before the person answers (empty when "always"
    would cover only this exact call)."""
    from .display import escape
    from .scopes import always_scopes

    try:
        scopes = always_scopes(request)
    except Exception:  # showing the scope must never stop the question being asked
        return ""
    if not scopes:
        return ""
    return f"  [a] covers from now on: {escape('; '.join(scopes))[:300]}\n"
