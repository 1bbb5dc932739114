"""ACP terminals and file reads, bounded: memory measured with real processes, not assumed."""

from __future__ import annotations

import sys
import threading
import tracemalloc
from pathlib import Path

import anyio
import pytest

from orchestrate.run import confined, workspace
from orchestrate.run.terminals import DEFAULT_OUTPUT_LIMIT, Terminal, Terminals

pytestmark = pytest.mark.anyio


async def test_output_keeps_the_last_bytes_at_a_character_boundary(tmp_path: Path) -> None:
    code = "import sys; sys.stdout.write('é' * 100 + 'end'); sys.stdout.flush()"
    async with anyio.create_task_group() as tg:
        terminal = await Terminal.start(tg, [sys.executable, "-c", code], tmp_path, {}, output_limit=11)
        assert await terminal.wait() == (0, None)
        assert terminal.truncated and terminal.output.endswith("end") and "\ufffd" not in terminal.output
        assert len(terminal.output.encode()) <= 11
        terminal.kill()


async def test_fifty_megabytes_of_output_hold_about_the_limit(tmp_path: Path) -> None:
    """No outputByteLimit from the agent: the default keeps the tail, and memory stays near it."""
    code = "import os\nfor _ in range(800): os.write(1, b'x' * 65536)\nos.write(1, b'tail')"
    tracemalloc.start()
    try:
        async with anyio.create_task_group() as tg:
            terminal = await Terminal.start(tg, [sys.executable, "-c", code], tmp_path, {}, None)
            with anyio.fail_after(20):
                assert await terminal.wait() == (0, None)
            _, peak = tracemalloc.get_traced_memory()
            terminal.kill()
    finally:
        tracemalloc.stop()
    assert terminal.truncated and terminal.output.endswith("xtail")
    assert len(terminal.output.encode()) == DEFAULT_OUTPUT_LIMIT
    assert peak < 6 * DEFAULT_OUTPUT_LIMIT, f"{peak} bytes held for 52 MB of output"


async def test_terminals_close_and_never_reuse_ids(tmp_path: Path) -> None:
    terminals = Terminals()
    async with anyio.create_task_group() as tg:
        first = await terminals.create(tg, ["sleep", "30"], tmp_path, {}, None)
        assert terminals.release(first) and terminals.get(first) is None
        second = await terminals.create(tg, ["sleep", "30"], tmp_path, {}, None)
        live = terminals.get(second)
        assert second != first and live is not None
        terminals.close()
        with anyio.fail_after(5):
            assert (await live.wait())[1] == "SIGTERM"


async def test_file_reads_at_once_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Forty reads asked at once run at most FILE_THREADS at a time, so at most that many files'
    contents are being read into memory together."""
    (tmp_path / "f").write_bytes(b"x" * 1000)
    running, most = 0, 0
    lock = threading.Lock()
    real_read = confined.Beneath.read

    def counting_read(self: confined.Beneath, *args: object) -> bytes:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        try:
            threading.Event().wait(0.02)
            return real_read(self, *args)  # type: ignore[arg-type]
        finally:
            with lock:
                running -= 1

    monkeypatch.setattr(confined.Beneath, "read", counting_read)
    files = workspace.Workspace(tmp_path)
    async with anyio.create_task_group() as tg:
        for _ in range(40):
            tg.start_soon(files.read_text, "f")
    assert most == workspace.FILE_THREADS
