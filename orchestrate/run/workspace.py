"""The agent's file access, confined to the session's workspace.

A path is resolved the way the kernel would open it (``..`` folded, every symlink followed) and must
land inside the workspace root, itself resolved.  The file is then opened by that resolved path
with ``O_NOFOLLOW``, so a link swapped in after the check is refused rather than followed.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import OrchestrateError

__all__ = ["OutsideWorkspaceError", "Workspace"]

MAX_READ_BYTES = 16 * 1024 * 1024


class OutsideWorkspaceError(OrchestrateError):
    def __init__(self, path: str, root: Path) -> None:
        self.path = path
        super().__init__(f"{path} is outside the session's workspace {root}")


class Workspace:
    def __init__(self, root: Path) -> None:
        self.root = Path(os.path.realpath(root))

    def resolve(self, path: str) -> Path:
        """The real path of ``path`` (relative paths are taken from the root), or
        OutsideWorkspaceError when it leads out by any route."""
        candidate = Path(path) if Path(path).is_absolute() else self.root / path
        real = Path(os.path.realpath(candidate))
        if real != self.root and self.root not in real.parents:
            raise OutsideWorkspaceError(path, self.root)
        return real

    def read_text(self, path: str, line: int | None = None, limit: int | None = None) -> str:
        """The file's text (invalid UTF-8 replaced), from 1-based ``line``, at most ``limit`` lines."""
        real = self.resolve(path)
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            data = f.read(MAX_READ_BYTES + 1)
        if len(data) > MAX_READ_BYTES:
            raise OSError(f"{path} is larger than {MAX_READ_BYTES} bytes")
        text = data.decode("utf-8", "replace")
        if line is None and limit is None:
            return text
        lines = text.splitlines(keepends=True)
        start = max((line or 1) - 1, 0)
        return "".join(lines[start : start + limit] if limit is not None else lines[start:])

    def write_text(self, path: str, content: str) -> Path:
        real = self.resolve(path)
        real.parent.mkdir(parents=True, exist_ok=True)
        # mkdir may have walked a link planted meanwhile: check again before writing.
        real = self.resolve(str(real))
        fd = os.open(real, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(content.encode("utf-8"))
        return real
