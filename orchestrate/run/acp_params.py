"""The params of the four requests an ACP agent sends us, validated as the ACP SDK validates them.

The SDK's ``acp.schema`` builds all 273 models of the protocol when it is imported: 640-890 ms of
CPU at the start of every ACP run, before ``initialize`` could be written (the agent's first entry
came that much later than from the CLI alone; bench/first_entry.py).  We read four requests, so
these are those four and the 15 models they reach, declared field for field as the SDK declares
them (schema v1.19.0, agent-client-protocol 0.12): the same types, aliases, bounds, discriminators,
``populate_by_name``, and the SDK's lenient reading (a malformed optional field becomes None, an
invalid item of a list is dropped).  tests/test_acp_params.py holds them equal to the SDK, which is
now the tests' oracle only: the same JSON schema, and the same result (or the same refusal) for
every request of the fixtures and for generated ones.

Built when the first request comes (run/acp.py and acp_tools.py import this module there):
~20 ms, not at the start.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

__all__ = [
    "CreateTerminalRequest",
    "ReadTextFileRequest",
    "RequestPermissionRequest",
    "WriteTextFileRequest",
]

PermissionOptionKind = Literal["allow_once", "allow_always", "reject_once", "reject_always"]
ToolCallStatus = Literal["pending", "in_progress", "completed", "failed"]
ToolKind = Literal[
    "read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"
]
Meta = Annotated[dict[str, Any] | None, Field(alias="_meta")]


def _salvage(value: Any, handler: Callable[[Any], Any]) -> Any:
    """The schema's ``x-deserialize-default-on-error``: a malformed optional field reads as None."""
    try:
        return handler(value)
    except ValidationError:
        return None


def _skip_invalid(value: Any, handler: Callable[[Any], Any]) -> Any:
    """The schema's ``x-deserialize-skip-invalid-items``: an item that does not validate is dropped,
    each survivor validated (and salvaged) through the list's own handler."""
    if not isinstance(value, list):
        return handler(value)
    kept: list[Any] = []
    for item in value:
        try:
            kept.append(handler([item])[0])
        except ValidationError:
            continue
    return kept


def _salvaging(*fields: str, check_fields: bool | None = None) -> Any:
    """The wrap validator of ``fields`` that reads a malformed value as None (:func:`_salvage`)."""
    return field_validator(*fields, mode="wrap", check_fields=check_fields)(_salvage_wrap)


def _skipping(*fields: str) -> Any:
    """The wrap validator of the list ``fields`` that drops invalid items (:func:`_skip_invalid`)."""
    return field_validator(*fields, mode="wrap")(_skip_wrap)


def _salvage_wrap(cls: type, value: Any, handler: Callable[[Any], Any]) -> Any:
    return _salvage(value, handler)


def _skip_wrap(cls: type, value: Any, handler: Callable[[Any], Any]) -> Any:
    return _skip_invalid(value, handler)


class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    _meta = _salvaging("field_meta", check_fields=False)


class Annotations(_Model):
    audience: list[str] | None = None
    last_modified: Annotated[str | None, Field(alias="lastModified")] = None
    priority: float | None = None
    field_meta: Meta = None

    _salvaged = _salvaging("last_modified", "priority")

    _skipped = _skipping("audience")


class _Annotated(_Model):
    """A content block's ``annotations``, salvaged."""

    annotations: Annotations | None = None

    _salvaged_annotations = _salvaging("annotations")


class TextContentBlock(_Annotated):
    text: str
    field_meta: Meta = None
    type: Literal["text"]


class ImageContentBlock(_Annotated):
    data: str
    mime_type: Annotated[str, Field(alias="mimeType")]
    uri: str | None = None
    field_meta: Meta = None
    type: Literal["image"]

    _salvaged = _salvaging("uri")


class AudioContentBlock(_Annotated):
    data: str
    mime_type: Annotated[str, Field(alias="mimeType")]
    field_meta: Meta = None
    type: Literal["audio"]


class ResourceContentBlock(_Annotated):
    description: str | None = None
    mime_type: Annotated[str | None, Field(alias="mimeType")] = None
    name: str
    size: int | None = None
    title: str | None = None
    uri: str
    field_meta: Meta = None
    type: Literal["resource_link"]

    _salvaged = _salvaging("description", "mime_type", "size", "title")


class TextResourceContents(_Model):
    mime_type: Annotated[str | None, Field(alias="mimeType")] = None
    text: str
    uri: str
    field_meta: Meta = None

    _salvaged = _salvaging("mime_type")


class BlobResourceContents(_Model):
    blob: str
    mime_type: Annotated[str | None, Field(alias="mimeType")] = None
    uri: str
    field_meta: Meta = None

    _salvaged = _salvaging("mime_type")


class EmbeddedResourceContentBlock(_Annotated):
    resource: TextResourceContents | BlobResourceContents
    field_meta: Meta = None
    type: Literal["resource"]


ContentBlock = Annotated[
    TextContentBlock
    | ImageContentBlock
    | AudioContentBlock
    | ResourceContentBlock
    | EmbeddedResourceContentBlock,
    Field(discriminator="type"),
]


class ContentToolCallContent(_Model):
    content: ContentBlock
    field_meta: Meta = None
    type: Literal["content"]


class FileEditToolCallContent(_Model):
    path: str
    old_text: Annotated[str | None, Field(alias="oldText")] = None
    new_text: Annotated[str, Field(alias="newText")]
    field_meta: Meta = None
    type: Literal["diff"]

    _salvaged = _salvaging("old_text")


class TerminalToolCallContent(_Model):
    terminal_id: Annotated[str, Field(alias="terminalId")]
    field_meta: Meta = None
    type: Literal["terminal"]


class ToolCallLocation(_Model):
    path: str
    line: Annotated[int | None, Field(ge=0)] = None
    field_meta: Meta = None

    _salvaged = _salvaging("line")


class ToolCallUpdate(_Model):
    tool_call_id: Annotated[str, Field(alias="toolCallId")]
    kind: ToolKind | None = None
    status: ToolCallStatus | None = None
    title: str | None = None
    content: (
        list[
            Annotated[
                ContentToolCallContent | FileEditToolCallContent | TerminalToolCallContent,
                Field(discriminator="type"),
            ]
        ]
        | None
    ) = None
    locations: list[ToolCallLocation] | None = None
    raw_input: Annotated[Any | None, Field(alias="rawInput")] = None
    raw_output: Annotated[Any | None, Field(alias="rawOutput")] = None
    field_meta: Meta = None

    _salvaged = _salvaging("kind", "raw_input", "raw_output", "status", "title")

    _skipped = _skipping("content", "locations")


class PermissionOption(_Model):
    option_id: Annotated[str, Field(alias="optionId")]
    name: str
    kind: PermissionOptionKind
    field_meta: Meta = None


class EnvVariable(_Model):
    name: str
    value: str
    field_meta: Meta = None


class RequestPermissionRequest(_Model):
    session_id: Annotated[str, Field(alias="sessionId")]
    tool_call: Annotated[ToolCallUpdate, Field(alias="toolCall")]
    options: list[PermissionOption]
    field_meta: Meta = None


class ReadTextFileRequest(_Model):
    session_id: Annotated[str, Field(alias="sessionId")]
    path: str
    line: Annotated[int | None, Field(ge=0)] = None
    limit: Annotated[int | None, Field(ge=0)] = None
    field_meta: Meta = None

    _salvaged = _salvaging("limit", "line")


class WriteTextFileRequest(_Model):
    session_id: Annotated[str, Field(alias="sessionId")]
    path: str
    content: str
    field_meta: Meta = None


class CreateTerminalRequest(_Model):
    session_id: Annotated[str, Field(alias="sessionId")]
    command: str
    args: list[str] | None = None
    env: list[EnvVariable] | None = None
    cwd: str | None = None
    output_byte_limit: Annotated[int | None, Field(alias="outputByteLimit", ge=0)] = None
    field_meta: Meta = None

    _salvaged = _salvaging("cwd", "output_byte_limit")

    _skipped = _skipping("args", "env")
