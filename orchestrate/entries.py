"""The unified entry model: what every executor's output becomes.

Python attributes are snake_case; the JSON form (``by_alias``) uses the camelCase names of the
agent-executor seed (``toolName``, ``exitCode``, ``unifiedDiff`` ...), so a TypeScript board
written against that interface reads our output unchanged.  Every model is frozen and rejects
unknown fields; unions are discriminated on ``kind``.  Streaming is index-addressed: normalizers
emit :class:`EntryPatch` values that add an entry or replace it in place.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

if TYPE_CHECKING:  # (pydantic.type_adapter is loaded with the first PATCH_ADAPTER, not by a run)
    from pydantic import TypeAdapter

__all__ = [
    "NO_EXIT_CODE",
    "ActionType",
    "ApprovalInfo",
    "ApprovalOutcome",
    "AssistantMessage",
    "CommandResult",
    "CommandRun",
    "EntryMetadata",
    "EntryPatch",
    "EntryType",
    "ErrorEntry",
    "ErrorInfo",
    "FileChange",
    "FileEdit",
    "FileRead",
    "FileWrite",
    "GenericTool",
    "NormalizedEntry",
    "Plan",
    "PlanItem",
    "PlanStatus",
    "Search",
    "SystemMessage",
    "TaskAction",
    "Thinking",
    "TokenUsage",
    "TokenUsageEntry",
    "ToolResult",
    "ToolStatus",
    "ToolUse",
    "ToolUseEntry",
    "UserMessage",
    "WebFetch",
    "camel_key",
    "entry_json_schema",
]


class Model(BaseModel):
    """Base of every unified model: frozen, strict about fields, camelCase on the wire."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        ser_json_timedelta="float",
        # Each model's validator and serializer are built when it is first used, not when this
        # module is imported: a run's first entry needs a few of the ~30 (the patch, the entry,
        # its type), and every model built up front is ~0.5 ms of CPU that the agent's own
        # start-up shares the machine with (tests/test_first_entry_imports.py).
        defer_build=True,
    )

    def to_json_dict(self) -> dict[str, Any]:
        """The camelCase JSON form, with unset optional fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


# --- actions a tool call performs -------------------------------------------------------------


class FileChange(Model):
    type: Literal["create", "edit", "delete", "rename"] = "edit"
    unified_diff: str | None = None


NO_EXIT_CODE = -1
"""``exitCode`` of a command whose agent reported no exit code (it was interrupted, or the agent does
not say): the seed's ``CommandResult.exitCode`` is a number whenever a result is there, so a board
written against it never meets a missing or null one.  The tool's ``status`` says how it ended."""


class CommandResult(Model):
    exit_code: int = NO_EXIT_CODE
    stdout: str | None = None
    stderr: str | None = None
    duration_ms: int | None = None

    @field_validator("exit_code", mode="before")
    @classmethod
    def _unknown_exit_code(cls, value: Any) -> Any:
        return NO_EXIT_CODE if value is None else value


class FileRead(Model):
    kind: Literal["file_read"] = "file_read"
    path: str


class FileWrite(Model):
    kind: Literal["file_write"] = "file_write"
    path: str
    changes: tuple[FileChange, ...] = ()


class FileEdit(Model):
    kind: Literal["file_edit"] = "file_edit"
    path: str
    changes: tuple[FileChange, ...] = ()


class CommandRun(Model):
    kind: Literal["command_run"] = "command_run"
    command: str
    result: CommandResult | None = None


class Search(Model):
    kind: Literal["search"] = "search"
    query: str
    path: str | None = None


class WebFetch(Model):
    kind: Literal["web_fetch"] = "web_fetch"
    url: str
    prompt: str | None = None


class TaskAction(Model):
    """A sub-agent the agent started (Claude's Task/Agent tool)."""

    kind: Literal["task"] = "task"
    description: str
    prompt: str | None = None
    subagent_type: str | None = None


class GenericTool(Model):
    """Any other tool, MCP tools included, with its raw arguments and result."""

    kind: Literal["tool"] = "tool"
    tool_name: str
    args: Any = None
    result: Any = None


ActionType = Annotated[
    FileRead | FileWrite | FileEdit | CommandRun | Search | WebFetch | TaskAction | GenericTool,
    Field(discriminator="kind"),
]

# --- tool calls -------------------------------------------------------------------------------

ToolStatus = Literal[
    "created", "pending_approval", "running", "success", "failed", "denied", "timed_out", "cancelled"
]
ApprovalOutcome = Literal["pending", "approved", "denied", "timed_out", "cancelled"]


class ToolResult(Model):
    success: bool
    data: Any = None
    error: str | None = None


class ApprovalInfo(Model):
    """The approval a tool call went through: which request, what was decided, and why."""

    request_id: str
    decision: ApprovalOutcome = "pending"
    reason: str | None = None
    for_session: bool = False


class ToolUseEntry(Model):
    tool_name: str
    action: ActionType
    status: ToolStatus = "created"
    result: ToolResult | None = None
    approval: ApprovalInfo | None = None
    tool_call_id: str | None = None


# --- plans, usage, errors ---------------------------------------------------------------------


PlanStatus = Literal["pending", "in_progress", "completed", "cancelled"]


class PlanItem(Model):
    content: str
    status: PlanStatus = "pending"
    priority: str | None = None


class TokenUsage(Model):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    total_cost_usd: float | None = None
    context_window: int | None = None


ErrorCode = str
"""Open set; the ones we emit: setup_required, auth_required, protocol_error, process_exited, timeout,
api_error, api_retry, line_too_long, resume_failed, interrupted, agent_error."""


class ErrorInfo(Model):
    message: str
    code: ErrorCode | None = None
    stack: str | None = None


# --- entry types ------------------------------------------------------------------------------


class SystemMessage(Model):
    kind: Literal["system_message"] = "system_message"


class UserMessage(Model):
    kind: Literal["user_message"] = "user_message"


class AssistantMessage(Model):
    kind: Literal["assistant_message"] = "assistant_message"


class Thinking(Model):
    kind: Literal["thinking"] = "thinking"
    reasoning: str | None = None


class ToolUse(Model):
    kind: Literal["tool_use"] = "tool_use"
    tool: ToolUseEntry


class ErrorEntry(Model):
    kind: Literal["error"] = "error"
    error: ErrorInfo


class Plan(Model):
    kind: Literal["plan"] = "plan"
    items: tuple[PlanItem, ...] = ()


class TokenUsageEntry(Model):
    kind: Literal["token_usage"] = "token_usage"
    usage: TokenUsage


EntryType = Annotated[
    SystemMessage | UserMessage | AssistantMessage | Thinking | ToolUse | ErrorEntry | Plan | TokenUsageEntry,
    Field(discriminator="kind"),
]


_STANDARD_METADATA = frozenset({"sessionId", "session_id", "model"})


class EntryMetadata(Model):
    """The seed's ``NormalizedEntryMetadata``: ``sessionId`` and ``model``, and every other key at the
    top level of the JSON object, in camelCase (the seed's index signature).  In Python the other
    keys are held in ``extra`` (their camelCase names, see :func:`camel_key`); ``extra`` itself never
    appears in the JSON form.  A standard key wins over an extra one of the same name."""

    session_id: str | None = None
    model: str | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _gather_extra(cls, data: Any) -> Any:
        """The flat JSON form back into ``extra`` (and the nested ``extra`` of older stored runs)."""
        if not isinstance(data, dict):
            return data
        rest = {k: v for k, v in data.items() if k not in _STANDARD_METADATA and k != "extra"}
        nested = data.get("extra")
        if not rest and nested is None:
            return data
        out = {k: v for k, v in data.items() if k in _STANDARD_METADATA}
        extra = {camel_key(k): v for k, v in nested.items()} if isinstance(nested, dict) else {}
        if nested is not None and not isinstance(nested, dict):
            extra["extra"] = nested  # an agent's own key named "extra"
        extra.update({camel_key(k): v for k, v in rest.items()})
        out["extra"] = extra or None
        return out

    @model_serializer(mode="wrap")
    def _flatten_extra(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        extra = out.pop("extra", None)
        if extra:
            for key, value in extra.items():
                out.setdefault(key, value)
        return out

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # (the wrap serializer hides the fields from pydantic's generator: the flat form, spelt out)
        nullable = {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
        return {
            "title": "EntryMetadata",
            "type": "object",
            "properties": {"sessionId": nullable, "model": nullable},
            "additionalProperties": True,
        }


class NormalizedEntry(Model):
    index: int
    timestamp: datetime | None = None
    type: EntryType
    content: str = ""
    metadata: EntryMetadata | None = None


class EntryPatch(Model):
    """One step of the entry stream: add the entry at ``index``, or replace it in place."""

    op: Literal["add", "replace"]
    index: int
    entry: NormalizedEntry


PATCH_ADAPTER: TypeAdapter[EntryPatch]
"""Validates a patch from its JSON form; made when first asked for (it builds the patch's model)."""


def __getattr__(name: str) -> Any:
    if name == "PATCH_ADAPTER":
        return _patch_adapter()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _patch_adapter() -> TypeAdapter[EntryPatch]:
    adapter: TypeAdapter[EntryPatch] | None = globals().get("PATCH_ADAPTER")
    if adapter is None:
        from pydantic import TypeAdapter

        adapter = globals()["PATCH_ADAPTER"] = TypeAdapter(EntryPatch)
    return adapter


_CAMEL: dict[str, str] = {}


def camel_key(key: str) -> str:
    """A metadata key as the JSON form spells it (``stop_reason`` -> ``stopReason``); a key with
    characters an identifier cannot have is kept as it is."""
    found = _CAMEL.get(key)
    if found is None:
        found = to_camel(key) if key.replace("_", "").isalnum() and not key.startswith("_") else key
        if len(_CAMEL) < 4096:  # (the keys are the normalizers' own few; a bound all the same)
            _CAMEL[key] = found
    return found


def entry_json_schema() -> dict[str, Any]:
    """JSON Schema of one entry patch, in its camelCase wire form."""
    return _patch_adapter().json_schema(by_alias=True, mode="serialization")
