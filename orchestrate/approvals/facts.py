"""What a request really asks, worked out once for every step of the pipeline: the command line
parsed, the paths normalized and resolved, read-only decided by our own table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .base import ApprovalRequest
from .paths import PathForms
from .tools import is_read_only_tool

if TYPE_CHECKING:
    from .shell import ParsedLine

__all__ = ["Facts"]


@dataclass(frozen=True)
class Facts:
    request: ApprovalRequest
    line: ParsedLine | None
    paths: tuple[PathForms, ...]
    """The request's paths, then the files the command's redirections write."""
    unknown_writes: tuple[str, ...]
    """Redirection targets only known at run time (``> $F``)."""
    read_only: bool

    @classmethod
    def of(cls, request: ApprovalRequest) -> Facts:
        line = None
        if request.command is not None:
            # tree-sitter is loaded with the first command to judge, not with the package
            from .shell import parse_line

            line = parse_line(request.command)
        paths = [PathForms.of(p, request.cwd) for p in request.paths]
        unknown: list[str] = []
        for target in line.writes if line else ():
            if target.literal:
                paths.append(PathForms.of(target.text, request.cwd))
            else:
                unknown.append(target.text)
        return cls(
            request=request,
            line=line,
            paths=tuple(paths),
            unknown_writes=tuple(unknown),
            read_only=is_read_only_tool(request.tool_name) and request.command is None,
        )

    @property
    def request_paths(self) -> tuple[PathForms, ...]:
        return self.paths[: len(self.request.paths)]

    @property
    def clean_line(self) -> bool:
        """A command line rules may approve: fully read, no file written by a redirection, no
        variable set, and at least one command to judge."""
        line = self.line
        return (
            line is not None
            and not line.problems
            and not line.writes
            and not line.assignments
            and bool(line.runnable)
        )
