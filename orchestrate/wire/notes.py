"""The client's own decisions and findings, as typed events: what the run decided (an approval's
answer, an error of its own, the agent's exit, a restart ...) reaches the normalizer as one of
these, never as bytes we wrote read back.  Each is written to the raw log as JSON
(:meth:`to_json`) and read back by :func:`parse_note` for a replay, so a replay sees what the live
run saw.  The JSON is the raw log's ``event`` record, unchanged from the untyped notes it replaces:
logs written before these types replay the same.

Reading a note is tolerant, as reading an agent's line is: a field of the wrong type reads as
absent or as its text (:mod:`orchestrate.normalizers.values`' rules), an unknown kind is kept as an
:class:`OtherNote`; nothing in a damaged log makes the reader raise.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

__all__ = [
    "Approval",
    "ApprovalWithdrawn",
    "Cwd",
    "Exit",
    "Interrupt",
    "Note",
    "OtherNote",
    "PermissionPrompt",
    "Prepared",
    "Restart",
    "ResumedThread",
    "RunError",
    "Screen",
    "Stopped",
    "UserInput",
    "parse_note",
]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def _optional(value: Any) -> str | None:
    return None if value is None else _text(value)


class _Note:
    """JSON out: the kind under ``type``, then every field that has a value."""

    kind: ClassVar[str]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.kind}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass(frozen=True, slots=True)
class RunError(_Note):
    """The run's own verdict (a timeout, the agent died, a line the driver could not handle ...):
    an error entry with this code."""

    kind: ClassVar[str] = "run_error"
    code: str
    message: str
    line: str | None = None
    """The offending line, when there is one: the entry shows it."""
    stderr_tail: str | None = None

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RunError:
        # (str(), not _text(): a note written without a message showed "None", and still does)
        line = str(raw["line"]) if "line" in raw else None
        tail = raw.get("stderr_tail")
        tail = tail if isinstance(tail, str) else None
        return cls(str(raw.get("code")), str(raw.get("message")), line, tail)


@dataclass(frozen=True, slots=True)
class Restart(_Note):
    """A new process continues the run (a session that could not be resumed, started fresh)."""

    kind: ClassVar[str] = "restart"
    argv: tuple[str, ...]
    reason: str

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Restart:
        argv = raw.get("argv")
        words = tuple(_text(a) for a in argv) if isinstance(argv, list) else ()
        return cls(words, _text(raw.get("reason")) or "restarting the agent")


@dataclass(frozen=True, slots=True)
class Exit(_Note):
    """The agent's process ended with this code (None: killed by a signal, or never reaped)."""

    kind: ClassVar[str] = "exit"
    code: int | None

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Exit:
        code = raw.get("code")
        return cls(code if isinstance(code, int) and not isinstance(code, bool) else None)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.kind, "code": self.code}  # (a null code is news: no exit status)


@dataclass(frozen=True, slots=True)
class Prepared(_Note):
    """What was done before the spawn to work around a CLI's known trouble."""

    kind: ClassVar[str] = "prepared"
    actions: tuple[str, ...]

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Prepared:
        actions = raw.get("actions")
        return cls(tuple(_text(a) for a in actions) if isinstance(actions, list) else ())


@dataclass(frozen=True, slots=True)
class Approval(_Note):
    """How a permission request (or a question to the person) was answered."""

    kind: ClassVar[str] = "approval"
    request_id: str
    decision: str
    """approved, denied or timed_out (the approval service's status)."""
    reason: str | None = None
    for_session: bool = False
    interrupt: bool = False
    question: str | None = None
    """What was asked, when not a tool's permission (``elicitation``); the JSON calls it ``kind``."""
    path: str | None = None
    """The file a write was asked for (an ACP ``fs/write_text_file``), as resolved."""
    command: str | None = None
    """The command line a terminal was asked for (an ACP ``terminal/create``)."""

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Approval:
        return cls(
            _text(raw.get("request_id")),
            _text(raw.get("decision")),
            _optional(raw.get("reason")),
            bool(raw.get("for_session")),
            bool(raw.get("interrupt")),
            _optional(raw.get("kind")),
            _optional(raw.get("path")),
            _optional(raw.get("command")),
        )

    def to_json(self) -> dict[str, Any]:
        out = {
            "type": self.kind,
            "request_id": self.request_id,
            "decision": self.decision,
            "reason": self.reason,
            "for_session": self.for_session,
            "interrupt": self.interrupt,
        }
        for key, value in (("kind", self.question), ("path", self.path), ("command", self.command)):
            if value is not None:
                out[key] = value
        return out


@dataclass(frozen=True, slots=True)
class ApprovalWithdrawn(_Note):
    """A question taken back before it was answered (the agent withdrew it, or its turn ended)."""

    kind: ClassVar[str] = "approval_withdrawn"
    request_id: str

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ApprovalWithdrawn:
        return cls(_text(raw.get("request_id")))


@dataclass(frozen=True, slots=True)
class Stopped(_Note):
    """The client stopped the agent itself (one that does not exit when its input closes)."""

    kind: ClassVar[str] = "stopped"
    reason: str

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Stopped:
        return cls(_text(raw.get("reason")))


@dataclass(frozen=True, slots=True)
class ResumedThread(_Note):
    """A one-turn process continues an earlier thread (``codex exec resume``)."""

    kind: ClassVar[str] = "resumed_thread"
    thread_id: str | None

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ResumedThread:
        return cls(_optional(raw.get("thread_id")))


@dataclass(frozen=True, slots=True)
class Cwd(_Note):
    """The task's working directory, for a protocol that never says it."""

    kind: ClassVar[str] = "cwd"
    cwd: str

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Cwd:
        return cls(_text(raw.get("cwd")))


@dataclass(frozen=True, slots=True)
class UserInput(_Note):
    """A prompt typed into a text UI (the screen as it was then is the answer's "before")."""

    kind: ClassVar[str] = "user_input"
    text: str

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> UserInput:
        return cls(_text(raw.get("text")))


@dataclass(frozen=True, slots=True)
class Interrupt(_Note):
    """The interrupt keys were pressed in a text UI."""

    kind: ClassVar[str] = "interrupt"

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Interrupt:
        return cls()


@dataclass(frozen=True, slots=True)
class Screen(_Note):
    """A look at a text UI's screen: ``still`` when it stopped moving, ``idle`` when the turn is over."""

    kind: ClassVar[str] = "screen"
    still: bool
    idle: bool

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Screen:
        return cls(bool(raw.get("still")), bool(raw.get("idle")))


@dataclass(frozen=True, slots=True)
class PermissionPrompt(_Note):
    """A permission question found on a text UI's screen."""

    kind: ClassVar[str] = "permission_prompt"
    request_id: str
    what: str
    tool: str
    text: str

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> PermissionPrompt:
        values = (_text(raw.get(key)) for key in ("request_id", "what", "tool", "text"))
        return cls(*values)


@dataclass(frozen=True, slots=True)
class OtherNote:
    """A note of a kind this version does not know (a newer log, a damaged one): kept as it is."""

    raw: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return self.raw


Note = (
    RunError
    | Restart
    | Exit
    | Prepared
    | Approval
    | ApprovalWithdrawn
    | Stopped
    | ResumedThread
    | Cwd
    | UserInput
    | Interrupt
    | Screen
    | PermissionPrompt
    | OtherNote
)

_KINDS: dict[str, Any] = {
    cls.kind: cls.from_json
    for cls in (
        RunError,
        Restart,
        Exit,
        Prepared,
        Approval,
        ApprovalWithdrawn,
        Stopped,
        ResumedThread,
        Cwd,
        UserInput,
        Interrupt,
        Screen,
        PermissionPrompt,
    )
}


def parse_note(raw: Any) -> Note:
    """A raw log's ``event`` record as the typed note the live run made."""
    if not isinstance(raw, dict):
        return OtherNote({"value": raw})
    kind = raw.get("type")
    parse = _KINDS.get(kind) if isinstance(kind, str) else None
    note: Note = parse(raw) if parse is not None else OtherNote(raw)
    return note
