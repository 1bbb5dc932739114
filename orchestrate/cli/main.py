"""The ``orchestrate`` command.  It parses options and calls the library; it holds no logic of its own.

Exit codes: 0 success, 1 the agent reported failure (or the run timed out, or a permission was
refused because nobody could answer it), 2 usage error (``--approvals ask`` with no terminal
included), 3 executor not available, 130 interrupted.
"""

from __future__ import annotations

import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import click
import orjson
from rich.console import Console
from rich.table import Table

from ..approvals import ApprovalService, AutoApprove, AutoDeny, RulePolicy, TerminalPrompt
from ..approvals.prompt import NoTerminalError
from ..entries import EntryPatch, entry_json_schema
from ..errors import (
    ConfigError,
    ExecutorUnavailableError,
    OrchestrateError,
    RawLogError,
    SpawnError,
    UnknownExecutorError,
)
from ..executors.base import ExecutorOptions
from ..executors.config import load_mcp_servers, parse_config_overrides
from ..process.env import parse_env_overrides
from ..registry import default_registry
from ..replay import normalizer_for_file, replay
from ..run import Run, RunResult
from ..task import Task
from ..testing.conformance import SCENARIOS, Cell, run_conformance
from ..testing.demo import demo_task
from ..testing.model_server import ScriptedModelServer
from ..testing.recording import FIXTURE_FOLDERS, record_case
from ..testing.scenario import Scenario
from ..testing.upgrade import upgrade as run_upgrade
from .render import TextRenderer
from .tasks import record_run, register

__all__ = ["main"]

EXIT_UNANSWERED = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3


class CliError(click.ClickException):
    """An error with our documented exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]  # click declares it on the class


def _translate(exc: OrchestrateError) -> CliError:
    if isinstance(exc, ExecutorUnavailableError | SpawnError):
        return CliError(str(exc), EXIT_UNAVAILABLE)
    if isinstance(exc, UnknownExecutorError | ConfigError | RawLogError):
        return CliError(str(exc), EXIT_USAGE)
    return CliError(str(exc), 1)


@click.group()
@click.version_option(package_name="agent-orchestrate")
def main() -> None:
    """Run coding-agent CLIs and stream what they do as one typed entry model."""


# --- run ----------------------------------------------------------------------------------------


@main.command()
@click.option(
    "--executor", "-e", "executor_name", required=True, help="Which agent (see `orchestrate executors`)."
)
@click.option("--cwd", type=click.Path(file_okay=False, exists=True, path_type=Path), default=Path.cwd)
@click.option("--model", help="Model name passed to the agent.")
@click.option(
    "--approvals", default="ask", show_default=True, help="auto | deny | ask | PATH to a policy file."
)
@click.option("--approval-timeout", type=float, default=600.0, show_default=True)
@click.option("--resume", help="Session id to continue.")
@click.option("--fork", is_flag=True, help="With --resume: continue in a new session.")
@click.option("--resume-fallback", is_flag=True, help="Start fresh if the resumed session is gone.")
@click.option("--permission-mode", help="The agent's own permission mode (Claude: default, acceptEdits ...).")
@click.option(
    "--base-command",
    "--command",
    "base_command",
    help="The CLI to run: a path, 'npx -y @anthropic-ai/claude-code@2.1.330', or any ACP agent's command.",
)
@click.option("--env", "env_pairs", multiple=True, metavar="K=V", help="Environment override (repeatable).")
@click.option("--sandbox", help="Codex: read-only | workspace-write (default) | danger-full-access.")
@click.option("--approval-policy", help="Codex: untrusted (default) | on-request | never.")
@click.option(
    "--config",
    "-c",
    "config_pairs",
    multiple=True,
    metavar="K=V",
    help="CLI configuration override, value in TOML (Codex: -c); repeatable.",
)
@click.option(
    "--mcp-config",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help='MCP servers as JSON: {"name": {"command": ..., "args": [...], "env": {...}}}.',
)
@click.option(
    "--stable-seconds",
    type=click.FloatRange(min=0, min_open=True),
    help="Terminal agents: seconds the screen must be still for a turn to be over.",
)
@click.option("--record", type=click.Path(dir_okay=False, path_type=Path), help="Write the raw log here.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), help="Seconds for the whole run.")
@click.option("--output", type=click.Choice(["text", "jsonl"]), default="text", show_default=True)
@click.argument("prompt")
def run(
    executor_name: str,
    cwd: Path,
    model: str | None,
    approvals: str,
    approval_timeout: float,
    resume: str | None,
    fork: bool,
    resume_fallback: bool,
    permission_mode: str | None,
    base_command: str | None,
    env_pairs: tuple[str, ...],
    sandbox: str | None,
    approval_policy: str | None,
    config_pairs: tuple[str, ...],
    mcp_config: Path | None,
    stable_seconds: float | None,
    record: Path | None,
    timeout: float | None,
    output: str,
    prompt: str,
) -> None:
    """Run PROMPT with an agent and stream what it does.  PROMPT `-` reads it from stdin."""
    try:
        options = ExecutorOptions(
            model=model,
            permission_mode=permission_mode,
            base_command=base_command,
            sandbox=sandbox,
            approval_policy=approval_policy,
            config=parse_config_overrides(config_pairs),
            mcp_servers=load_mcp_servers(mcp_config) if mcp_config else {},
            stable_seconds=stable_seconds,
        )
        executor = default_registry.create(executor_name, options)
        env = parse_env_overrides(env_pairs)
        # Last of the checks, before anything is read or started: a terminal to ask on.
        service, asker = _approval_service(approvals, _given(click.get_current_context(), "approvals"))
        if prompt == "-":
            prompt = sys.stdin.read()
            if not prompt.strip():
                raise CliError("no prompt on stdin", EXIT_USAGE)
        task = Task(
            prompt=prompt,
            cwd=cwd.resolve(),
            resume=resume,
            fork=fork,
            resume_fallback=resume_fallback,
            env=env,
            timeout=timeout,
            approval_timeout=approval_timeout,
            raw_log=record,
        )
        live = Run(executor, task, service)
        try:
            # Recorded in the store as a task (`orchestrate tasks`); a store failure only warns.
            with record_run(executor_name, options, live, output) as recording:
                result = anyio.run(_run_live, live, recording.sink(_sink(output)), asker)
                recording.result = result
        finally:
            asker.close()
    except OrchestrateError as exc:
        raise _translate(exc) from exc
    if output == "text":
        _summary(result)
    sys.exit(_exit_code(result, asker))


def _given(ctx: click.Context, name: str) -> bool:
    """Whether option ``name`` was given (not left to its default)."""
    return ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)


def _approval_service(spec: str, given: bool = True) -> tuple[ApprovalService, TerminalPrompt]:
    """The service for ``--approvals``, and the terminal prompt it may ask through.

    ``ask`` needs a terminal: without one the run would refuse every tool it should have asked
    about, so it stops here with a usage error instead.  A policy file whose fallback is ``ask``
    runs anyway; what nobody can answer is refused, and the exit code says so (see _exit_code)."""
    asker = TerminalPrompt()
    match spec:
        case "auto":
            return AutoApprove(), asker
        case "deny":
            return AutoDeny(), asker
        case "ask":
            try:
                asker.open()
            except NoTerminalError as exc:
                default = "" if given else " (the default)"
                raise CliError(
                    f"--approvals ask{default} needs a terminal to ask on, and there is none ({exc}). "
                    "Choose --approvals auto, deny or a policy file.",
                    EXIT_USAGE,
                ) from exc
            return asker, asker
    path = Path(spec)
    if not path.is_file():
        raise CliError(
            f"--approvals must be auto, deny, ask or a policy file; {spec!r} is none of these", EXIT_USAGE
        )
    try:
        return RulePolicy.from_file(path, ask=asker), asker
    except OrchestrateError as exc:
        raise _translate(exc) from exc


def _exit_code(result: RunResult, asker: TerminalPrompt) -> int:
    """The outcome's code, but never 0 when a permission was refused because nobody answered (no
    terminal, its input ended, the approval timed out): the run did not do what it was asked."""
    code = result.cli_exit_code
    timed_out = any(t.approval and t.approval.decision == "timed_out" for t in result.tool_results)
    if code == 0 and (asker.unanswered or timed_out):
        return EXIT_UNANSWERED
    return code


async def _run_live(
    run: Run, sink: Callable[[EntryPatch], None], asker: TerminalPrompt | None = None
) -> RunResult:
    async with run, anyio.create_task_group() as tg:
        tg.start_soon(_on_sigint, run, asker)
        async for patch in run.patches():
            sink(patch)
        result = await run.wait()
        tg.cancel_scope.cancel()
    return result


async def _on_sigint(run: Run, asker: TerminalPrompt | None = None) -> None:
    # First Ctrl-C interrupts the turn the agent's own way; a second one stops the run now.
    with anyio.open_signal_receiver(signal.SIGINT) as signals:
        count = 0
        async for _ in signals:
            count += 1
            if asker is not None:
                asker.interrupt()  # a question on screen is answered "no, and stop the turn"
            if count == 1:
                click.echo("\ninterrupting (Ctrl-C again to stop now)", err=True)
                try:
                    await run.interrupt()
                except OrchestrateError:
                    run.cancel()
            else:
                run.cancel()


def _sink(output: str) -> Callable[[EntryPatch], None]:
    if output == "jsonl":
        out = sys.stdout.buffer

        def write_jsonl(patch: EntryPatch) -> None:
            out.write(orjson.dumps(patch.to_json_dict()) + b"\n")
            out.flush()

        return write_jsonl
    renderer = TextRenderer(Console(highlight=False))
    return renderer.on_patch


def _summary(result: RunResult) -> None:
    console = Console(stderr=True, highlight=False)
    style = {"success": "green", "interrupted": "yellow", "cancelled": "yellow"}.get(result.outcome, "red")
    console.print(
        f"\n[{style}]{result.outcome}[/]  session {result.session_id or '-'}  raw log {result.raw_log}"
    )
    if result.outcome != "success" and result.error:
        console.print(f"[red]{result.error}[/]", markup=False)


@main.command()
@click.option(
    "--approvals", default="auto", show_default=True, help="auto | deny | ask | PATH to a policy file."
)
@click.option("--output", type=click.Choice(["text", "jsonl"]), default="text", show_default=True)
def demo(approvals: str, output: str) -> None:
    """Run the real Claude Code CLI on an embedded task against a scripted local model (no API key)."""
    service, asker = _approval_service(approvals, _given(click.get_current_context(), "approvals"))
    try:
        executor = default_registry.create("claude-code")
        with demo_task() as task:
            result = anyio.run(_run_live, Run(executor, task, service), _sink(output), asker)
    except OrchestrateError as exc:
        raise _translate(exc) from exc
    finally:
        asker.close()
    if output == "text":
        _summary(result)
    sys.exit(_exit_code(result, asker))


# --- executors, replay, schema ------------------------------------------------------------------


@main.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object per executor.")
def executors(as_json: bool) -> None:
    """List executors: protocol, installed version, capabilities."""
    rows = anyio.run(_availability)
    if as_json:
        click.echo(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
        return
    table = Table("executor", "protocol", "version", "credentials", "capabilities", box=None, pad_edge=False)
    for row in rows:
        caps = ", ".join(
            k.removeprefix("supports")
            for k, v in row["capabilities"].items()
            if v is True and k != "requiresSetup"
        )
        creds = {True: "configured", False: "none found", None: "-"}[row["credentials"]]
        table.add_row(row["name"], row["protocol"], row["version"] or "not found", creds, caps)
    Console(highlight=False).print(table)


async def _availability() -> list[dict[str, Any]]:
    rows = []
    for name in default_registry.names():
        cls = default_registry.get(name)
        avail = await cls().check_availability()
        rows.append(
            {
                "name": name,
                "protocol": cls.protocol,
                "installed": avail.installed,
                "version": avail.version,
                "path": avail.path,
                "reason": avail.reason,
                "credentials": avail.credentials,
                "credentials_source": avail.credentials_source,
                "source": default_registry.sources.get(name),
                "capabilities": cls.capabilities.to_json_dict(),
            }
        )
    return rows


@main.command(name="replay")
@click.argument("file", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option("--executor", "-e", "executor_name", required=True)
@click.option("--output", type=click.Choice(["text", "jsonl"]), default="text", show_default=True)
def replay_cmd(file: Path, executor_name: str, output: str) -> None:
    """Normalize FILE, a raw log of ours or a plain stdout capture of the CLI."""
    try:
        normalizer = normalizer_for_file(file, default_registry.get(executor_name)())
        sink = _sink(output)
        for patch in replay(file, normalizer):
            sink(patch)
    except OrchestrateError as exc:
        raise _translate(exc) from exc
    if output == "text":
        click.echo()


@main.command()
def schema() -> None:
    """Print the JSON Schema of one entry patch (the lines of `--output jsonl`)."""
    click.echo(orjson.dumps(entry_json_schema(), option=orjson.OPT_INDENT_2).decode())


# --- the conformance lab: scripted model, recording, conformance ---------------------------------


@main.command(name="model-server")
@click.option(
    "--scenario",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    required=True,
    help="Scenario file (JSON or YAML).",
)
@click.option("--port", type=int, default=0, show_default=True, help="0: any free port.")
@click.option("--port-file", type=click.Path(dir_okay=False, path_type=Path), help="Write the port here.")
@click.option(
    "--log", "log_path", type=click.Path(dir_okay=False, path_type=Path), help="Append requests here."
)
def model_server(scenario: Path, port: int, port_file: Path | None, log_path: Path | None) -> None:
    """Serve a scripted model on 127.0.0.1 (Anthropic, OpenAI Responses and chat, Gemini) until stopped."""
    try:
        server = ScriptedModelServer(Scenario.load(scenario), log_path=log_path, port=port)
    except OrchestrateError as exc:
        raise _translate(exc) from exc
    with server:
        if port_file is not None:
            port_file.write_text(str(server.port))
        click.echo(f"scripted model on {server.url}", err=True)
        # Block the signals and wait for one, so either ends the server cleanly.
        stop = {signal.SIGINT, signal.SIGTERM}
        signal.pthread_sigmask(signal.SIG_BLOCK, stop)
        signal.sigwait(stop)


@main.command()
@click.option("--executor", "-e", "executor_name", required=True)
@click.option(
    "--scenario",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    required=True,
    help="Case file (JSON or YAML): the scripted model's steps and how the run is driven.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Fixture to write (default fixtures/<protocol>/<scenario>.jsonl).",
)
def record(executor_name: str, scenario: Path, out: Path | None) -> None:
    """Run the real CLI in a scratch home against the scripted model and write a scrubbed fixture."""
    folder = FIXTURE_FOLDERS.get(executor_name, executor_name)
    out = out or Path("fixtures") / folder / f"{scenario.stem}.jsonl"
    try:
        default_registry.get(executor_name)
        result = anyio.run(_record, executor_name, scenario, out)
    except OrchestrateError as exc:
        raise _translate(exc) from exc
    click.echo(
        f"{out}: {result.outcome}, {len(result.entries)} entries (expected entries in "
        f"{out.with_suffix('.entries.json')})"
    )


async def _record(executor: str, scenario: Path, out: Path) -> RunResult:
    return await record_case(executor, scenario, out, project=Path.cwd())


@main.command()
@click.option(
    "--executor",
    "-e",
    "executor_names",
    multiple=True,
    help="Only these (repeatable); default every executor that has conformance scenarios.",
)
@click.option("--json", "as_json", is_flag=True, help="The matrix as JSON.")
@click.option(
    "--require-installed", is_flag=True, help="A CLI that is not installed fails instead of being skipped."
)
def conformance(executor_names: tuple[str, ...], as_json: bool, require_installed: bool) -> None:
    """Run the conformance scenarios on every installed real CLI against the scripted model."""
    try:
        cells = anyio.run(run_conformance, list(executor_names) or None)
    except OrchestrateError as exc:
        raise _translate(exc) from exc
    if as_json:
        click.echo(orjson.dumps([c.__dict__ for c in cells], option=orjson.OPT_INDENT_2).decode())
    else:
        _print_matrix(cells)
    bad = {"fail"} | ({"not installed"} if require_installed else set())
    sys.exit(1 if any(c.verdict in bad for c in cells) else 0)


def _print_matrix(cells: list[Cell]) -> None:
    console = Console(highlight=False, width=max(120, shutil.get_terminal_size().columns))
    table = Table("CLI", *SCENARIOS, box=None, pad_edge=False)
    styles = {"pass": "green", "fail": "bold red", "n/a": "dim", "not installed": "yellow"}
    for executor in dict.fromkeys(c.executor for c in cells):
        row = [c for c in cells if c.executor == executor]
        table.add_row(executor, *(f"[{styles[c.verdict]}]{c.verdict}[/]" for c in row))
    console.print(table)
    for cell in cells:
        if cell.verdict in ("fail", "n/a", "not installed") and cell.why:
            console.print(f"  {cell.executor} / {cell.scenario}: {cell.verdict}: {cell.why}", markup=False)


@main.command()
@click.option("--executor", "-e", "executor_name", required=True)
@click.option("--version", "version", default="latest", show_default=True, help="The version to pin.")
@click.option("--no-install", is_flag=True, help="Keep the pinned version; only re-record and compare.")
@click.option(
    "--pins",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=Path("clis"),
    show_default=True,
    help="Folder of the package.json that pins the CLIs.",
)
@click.option(
    "--fixtures",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=Path("fixtures"),
    show_default=True,
)
def upgrade(executor_name: str, version: str, no_install: bool, pins: Path, fixtures: Path) -> None:
    """Bump a pinned CLI, re-record its fixtures and print how the normalized entries changed."""
    try:
        bumped, changes = run_upgrade(
            executor_name, None if no_install else version, pins, fixtures, Path.cwd()
        )
    except OrchestrateError as exc:
        raise _translate(exc) from exc
    if bumped is not None:
        click.echo(f"{executor_name}: {bumped[0]} -> {bumped[1]}")
    for change in changes:
        click.echo(f"{change.case}: {'CHANGED' if change.changed else 'unchanged'} ({change.outcome})")
        if change.changed:
            click.echo(change.diff)
    changed = sum(c.changed for c in changes)
    click.echo(
        f"{len(changes) - changed} unchanged, {changed} changed: review the .entries.json diffs, then commit"
    )


register(main)  # submit, tasks, show, follow, cancel, retry, send, approvals, approve, deny, worker
