"""The ``orchestrate`` command.  It parses options and calls the library; it holds no logic of its own.

Exit codes: 0 success, 1 the agent reported failure (or the run timed out, or a permission was
refused because nobody could answer it; for replay, lines of the log could not be read), 2 usage
error (``--approvals ask`` with no terminal included), 3 executor not available, 128 + the signal
when one stopped the run: 130 interrupted (Ctrl-C), 143 SIGTERM, 129 SIGHUP.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

import anyio
import click
import orjson

from ..approvals.simple import AutoApprove, AutoDeny
from ..errors import (
    ConfigError,
    ExecutorUnavailableError,
    OrchestrateError,
    RawLogError,
    SpawnError,
    UnknownExecutorError,
)
from ..process.containment import kill_all
from ..process.env import parse_env_overrides
from ..registry import default_registry
from ..run.handle import Run
from ..task import Task
from . import resume_collector
from .options import build_executor_options, read_stdin, workspace_flags, workspace_run_options
from .view_prompt import ViewPrompt

if TYPE_CHECKING:
    from ..approvals.base import ApprovalService
    from ..approvals.prompt import TerminalPrompt
    from ..entries import EntryPatch
    from ..executors.base import Capabilities, Executor
    from ..run.result import RunResult
    from ..testing.conformance import Cell
    from .chat import Conversation
    from .live import LiveView
    from .render import TextRenderer

# Imported by the functions that use them, not here: `orchestrate run` must start its agent first,
# and load what only the agent's output needs (the view and rich, the entry models, the failure
# reasons, the chat) while the agent starts up; the testing tools (model server, conformance,
# recording) only for the commands that use them.  bench/startup.py guards this.

__all__ = ["main"]

EXIT_UNANSWERED = 1
# A person at a terminal should never wait on a run for ever: two hours for the whole run, two minutes
# for the agent's first output (a `npx -y` first download included); 0 lifts either.
DEFAULT_RUN_TIMEOUT = 7200.0
DEFAULT_STARTUP_TIMEOUT = 120.0
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3


class CliError(click.ClickException):
    """An error with our documented exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]  # click declares it on the class


def _translate(exc: OrchestrateError) -> CliError:
    from .failure import missing_cli

    if isinstance(exc, ExecutorUnavailableError) and exc.executor in default_registry.names():
        return CliError(missing_cli(default_registry.get(exc.executor), exc.reason), EXIT_UNAVAILABLE)
    if isinstance(exc, ExecutorUnavailableError | SpawnError):
        return CliError(str(exc), EXIT_UNAVAILABLE)
    if isinstance(exc, UnknownExecutorError | ConfigError | RawLogError):
        return CliError(str(exc), EXIT_USAGE)
    return CliError(str(exc), 1)


_TASK_COMMANDS = frozenset(
    {
        "submit",
        "tasks",
        "show",
        "follow",
        "cancel",
        "interrupt",
        "retry",
        "send",
        "approvals",
        "approve",
        "deny",
        "worker",
    }
)


_WORKSPACE_COMMANDS = frozenset({"diff", "checkpoints", "rollback", "workspace"})

# `--help` lists the commands in sections: what a person uses every day first, the task queue, then
# the lab (recording, replaying, checking the CLIs against the scripted model).  A command named in
# none (one a plugin or a later change adds) is listed with the everyday ones.
_LAB_COMMANDS = frozenset({"demo", "replay", "record", "model-server", "conformance", "upgrade", "schema"})
_SECTIONS = (
    ("Task queue", _TASK_COMMANDS),
    ("Workspaces: a task's worktree, its checkpoints and changes", _WORKSPACE_COMMANDS),
    ("Lab: try it with no key, record, replay, check the CLIs", _LAB_COMMANDS),
)


class _Group(click.Group):
    """The task commands live in cli/tasks.py, which imports the store and the engine (SQLAlchemy):
    loaded when one of them is asked for or the commands are listed, so the others start without.
    The workspace commands (cli/workspace.py) likewise."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        commands = [
            (name, cmd)
            for name in self.list_commands(ctx)
            if (cmd := self.get_command(ctx, name)) is not None and not cmd.hidden
        ]
        if not commands:
            return
        limit = formatter.width - 6 - max(len(name) for name, _ in commands)
        everyday = [c for c in commands if not any(c[0] in names for _, names in _SECTIONS)]
        groups = [("Commands", everyday)]
        groups += [(title, [c for c in commands if c[0] in names]) for title, names in _SECTIONS]
        for title, members in groups:
            if members:
                with formatter.section(title):
                    formatter.write_dl([(name, cmd.get_short_help_str(limit)) for name, cmd in members])

    def _load_tasks(self) -> None:
        if "submit" not in self.commands:
            from .tasks import register

            register(self)

    def _load_workspace(self) -> None:
        if "rollback" not in self.commands:
            from .workspace import register

            register(self)

    def _load_serve(self) -> None:
        if "serve" not in self.commands:
            from ..serve.cli import serve_command  # imports no ASGI stack until it runs

            self.add_command(serve_command)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._load_tasks()
        self._load_workspace()
        self._load_serve()
        return super().list_commands(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _TASK_COMMANDS:
            self._load_tasks()
        if cmd_name in _WORKSPACE_COMMANDS:
            self._load_workspace()
        elif cmd_name == "serve":
            self._load_serve()
        return super().get_command(ctx, cmd_name)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="agent-orchestrate")
def main() -> None:
    """Run coding-agent CLIs and stream what they do as one typed entry model.

    \b
    Examples:
      orchestrate demo                                  # a real agent on a scripted model, no key
      orchestrate run -e claude-code "fix the failing test"
      orchestrate run -e codex --approvals auto --output jsonl "add a README" > run.jsonl
      orchestrate executors                             # which agents are installed
    """
    if click.get_current_context().invoked_subcommand not in ("run", "chat"):
        resume_collector()  # paused while the command loaded; a run resumes it itself (recording.py)


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
@click.option(
    "--no-redact",
    is_flag=True,
    help="Keep secrets in the raw log (for debugging; also ORCHESTRATE_REDACT=0).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=DEFAULT_RUN_TIMEOUT,
    show_default=True,
    help="Seconds for the whole run (0: no limit); past it the run stops as timed out.",
)
@click.option(
    "--startup-timeout",
    type=click.FloatRange(min=0),
    default=DEFAULT_STARTUP_TIMEOUT,
    show_default=True,
    help="Seconds for the agent's first output (0: no limit); a CLI silent that long is stopped.",
)
@click.option(
    "--output",
    type=click.Choice(["text", "jsonl"]),
    default="text",
    show_default=True,
    help="text: for a person (a live view on a terminal, plain lines otherwise); jsonl: one entry "
    "patch per line, then a result line.",
)
@click.option(
    "--verbose", "-v", is_flag=True, help="Text: whole outputs, the agent's own tool names, every notice."
)
@click.option(
    "--interactive",
    "-i",
    is_flag=True,
    help="Stay in the session after the turn: type the next message (needs a terminal; "
    "same as `orchestrate chat`).",
)
@workspace_flags
@click.argument("prompt", required=False)
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
    no_redact: bool,
    timeout: float,
    startup_timeout: float,
    output: str,
    verbose: bool,
    interactive: bool,
    workspace: str | None,
    workspace_base: str | None,
    workspace_setup: str | None,
    workspace_globs: tuple[str, ...],
    workspace_keep: bool | None,
    workspace_root: Path | None,
    prompt: str | None,
) -> None:
    """Run PROMPT with an agent and stream what it does.  PROMPT `-` reads it from stdin.

    \b
    Examples:
      orchestrate run -e claude-code "fix the failing test"
      orchestrate run -e codex --cwd ../api --approvals policy.toml "add a health check"
      orchestrate run -e gemini --approvals auto --output jsonl "summarize README.md" | jq .
      git diff | orchestrate run -e claude-code --approvals deny -
      orchestrate run -e claude-code --resume SESSION_ID "now add tests"
      orchestrate run -e codex -i "look at the failing test"   # then keep talking
      orchestrate run -e claude-code --worktree --setup "npm ci" "fix the flaky test"
    """
    if prompt is None and not interactive:
        raise click.UsageError("missing PROMPT: say what the agent should do (or talk with --interactive)")
    if prompt is not None and prompt != "-" and not prompt.strip():
        raise click.UsageError("the prompt is empty: say what the agent should do")
    try:
        options = build_executor_options(
            model=model,
            permission_mode=permission_mode,
            base_command=base_command,
            sandbox=sandbox,
            approval_policy=approval_policy,
            config_pairs=config_pairs,
            mcp_config=mcp_config,
            stable_seconds=stable_seconds,
        )
        executor = default_registry.create(executor_name, options)
        env = parse_env_overrides(env_pairs)
        by_resume = False  # a conversation of one process per turn, each resuming the last
        if interactive:
            by_resume = _can_converse(executor_name, executor.capabilities)
        # Last of the checks, before anything is read or started: a terminal to ask on.
        service, asker = _approval_service(approvals, _given(click.get_current_context(), "approvals"))
        if interactive:
            _open_for_conversation(asker)
        if prompt == "-":
            prompt = read_stdin("prompt")
            if not prompt.strip():
                raise click.UsageError("no prompt on stdin: the prompt is empty")
        while prompt is None or prompt == "":  # a conversation begins with the first message typed
            from .chat import INPUT_PROMPT

            resume_collector()  # (a person may take their time: see cli/__init__.py)

            try:
                prompt = anyio.run(asker.read_line, INPUT_PROMPT)
            except KeyboardInterrupt:  # Ctrl-C before anything started
                prompt = None
            if prompt is None:  # Ctrl-D: nothing was said, nothing started
                asker.close()
                return
        in_workspace = workspace_run_options(
            workspace, workspace_base, workspace_setup, workspace_globs, workspace_keep, workspace_root
        )
        task = _task(
            **in_workspace,
            prompt=prompt,
            cwd=cwd.resolve(),
            resume=resume,
            fork=fork,
            resume_fallback=resume_fallback,
            env=env,
            timeout=_run_limit(timeout, interactive),
            startup_timeout=startup_timeout or None,
            approval_timeout=approval_timeout,
            raw_log=record,
            redact_raw_log=not no_redact,
            keep_open=interactive and not by_resume,
        )
        view = _view_maker(output, verbose, asker)  # made once the agent is spawned
        began = time.monotonic()
        made = None
        if task.workspace != "here":
            from .workspace import RunWorkspace  # git and the workspace layer, only when asked for

            resume_collector()  # (its setup may take minutes: see cli/__init__.py)

            made = RunWorkspace.prepare(task)
            task = made.task
        # Streaming: every output prints (and the store records) each patch as it comes, so the
        # run keeps a window of entries, not all of them; the result's figures are the whole run's.
        live = Run(executor, task, service, streaming=True)
        from .early import prompted, take

        early = take()  # the agent cli/early.py started, if it did: adopted if it is this run's
        if early is not None:
            live.adopt(early)
        stored: dict[str, int] | None = None
        try:
            if early is not None and early.discarded and prompted(early):  # refused by adopt
                from .early import say_killed

                say_killed(live.early_refused or "the run was refused")
                early = None
            # Recorded in the store as a task (`orchestrate tasks`); a store failure only warns.
            from .recording import record_run  # opens the store on a thread, beside the run

            with record_run(executor_name, options, live, output) as recording:
                if by_resume:
                    follow = _follow_up(executor, service)
                    talk = anyio.run(_chat_live, live, view, asker, recording.sink, follow)
                    result = talk.result
                elif interactive:
                    talk = anyio.run(_chat_live, live, view, asker, recording.sink)
                    result = talk.result
                else:
                    result = anyio.run(_run_live, live, view, asker, recording.cancelled, recording.sink)
                recording.result = result
                if made is not None:
                    made.finish(recording, result.raw_log)
                stored = recording.ids
        finally:
            asker.close()
            if early is not None and early.discarded and prompted(early):  # the run failed to start
                from .early import say_killed

                say_killed("the run could not start")
    except OrchestrateError as exc:
        error = _translate(exc)
        if output == "jsonl":  # a program reading the lines still gets its result line
            kind = "cli_missing" if isinstance(exc, ExecutorUnavailableError) else None
            with contextlib.suppress(OSError):
                JsonlWriter().write(not_started_line(error.message, kind, error.exit_code))
        raise error from exc
    if interactive:
        from .chat import cwd_option, resume_command

        resume = resume_command(
            executor_name,
            talk.session_id if executor.capabilities.session_resume else None,
            {"--cwd": cwd_option(cwd.resolve()), "--base-command": base_command, "--model": model},
        )
        _finish_conversation(output, talk, asker, time.monotonic() - began, stored, resume)
    _finish(output, result, asker, time.monotonic() - began, stored)


def _task(**fields: Any) -> Task:
    """The run's task; a value the model refuses (``--approval-timeout 0``) is a usage error."""
    from pydantic import ValidationError

    try:
        return Task(**fields)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}" for error in exc.errors()
        )
        raise click.UsageError(f"invalid option: {problems}") from None


def _chat(**options: Any) -> None:
    assert run.callback is not None
    click.get_current_context().invoke(run.callback, interactive=True, **options)


main.add_command(
    click.Command(
        "chat",
        # run's options, and its PROMPT (optional here: the first message can be typed instead)
        params=[p for p in run.params if p.name != "interactive"],
        callback=_chat,
        short_help="Talk with an agent: a session that stays open, one message after another.",
        help="""Talk with an agent on the terminal: after each turn type the next message (it goes to
        the same session).  Ctrl-C interrupts the turn and comes back to the input; Ctrl-C again, or
        Ctrl-C / Ctrl-D at the input, quits and prints the command that resumes the session.  PROMPT
        (optional) is the first message.  Same options as `orchestrate run`.

        \b
        Examples:
          orchestrate chat -e claude-code
          orchestrate chat -e codex "why does test_login fail?"
          orchestrate chat -e claude-code --resume SESSION_ID
        """,
    )
)


def _run_limit(timeout: float, interactive: bool) -> float | None:
    """--timeout in seconds (0: none).  A conversation lasts as long as the person talks: the default
    does not bound it, only a --timeout given does."""
    if interactive and not _given(click.get_current_context(), "timeout"):
        return None
    return timeout or None


def _can_converse(executor_name: str, capabilities: Capabilities) -> bool:
    """Whether ``executor_name`` converses by resume (one process per turn) rather than by messages
    to one process; refused when it can do neither."""
    if capabilities.mid_execution_messages:
        return False
    if capabilities.session_resume:
        return True
    names = default_registry.names()
    talkers = [n for n in names if _talks(default_registry.get(n).capabilities)]
    raise CliError(
        f"{executor_name} takes one prompt per process and cannot resume its session, so it cannot "
        f"hold a conversation; these can: {', '.join(talkers)}.",
        EXIT_USAGE,
    )


def _talks(capabilities: Capabilities) -> bool:
    return capabilities.mid_execution_messages or capabilities.session_resume


def _follow_up(executor: Executor, service: ApprovalService) -> Callable[[Run, str, str | None], Run]:
    """How a conversation by resume starts its next turn: the same task with the new message,
    resuming the session the last turn reported (a fresh one without), its raw log a new file."""

    def follow(previous: Run, message: str, session: str | None) -> Run:
        update = {"prompt": message, "resume": session, "fork": False, "raw_log": None}
        return Run(executor, previous.task.model_copy(update=update), service, streaming=True)

    return follow


def _open_for_conversation(asker: TerminalPrompt) -> None:
    from ..approvals.prompt import NoTerminalError

    try:
        asker.open()
    except NoTerminalError as exc:
        why = f"a conversation needs a terminal to type on, and there is none ({exc})"
        raise CliError(why, EXIT_USAGE) from exc


async def _chat_live(
    run: Run,
    make_view: Callable[[], View],
    asker: TerminalPrompt,
    tap: Callable[[Callable[[EntryPatch], None]], Callable[[EntryPatch], None]] | None = None,
    follow_up: Callable[[Run, str, str | None], Run] | None = None,
) -> Conversation:
    """:func:`chat.converse` (or, given ``follow_up``, :func:`chat.converse_by_resume`) with the
    CLI's view and notices."""
    from .chat import converse, converse_by_resume

    view = make_view()
    sink = _until_broken(tap(view.on_patch) if tap is not None else view.on_patch)
    with _showing(view):
        if follow_up is not None:
            return await converse_by_resume(run, follow_up, view, asker, sink, _tell)
        return await converse(run, view, asker, sink, _tell)


def _finish_conversation(
    output: str,
    talk: Conversation,
    asker: TerminalPrompt,
    seconds: float,
    stored: dict[str, int] | None,
    resume: str | None,
) -> None:
    """The summary (or result line), how to come back to the session, and the exit code: 0 when the
    person quit at the input, 128 + the signal that stopped it, else the run's own."""
    code = 128 + talk.stopped_by if talk.stopped_by else 0 if talk.quit_at_input else _exit_code(talk.result)
    if output == "jsonl":
        with contextlib.suppress(OSError):
            JsonlWriter().result(talk.result, code, seconds, stored)
    else:
        _summary(talk.result)
    with contextlib.suppress(OSError, ValueError):
        if resume is not None:
            click.echo(f"to continue this conversation: {resume}", err=True)
    sys.exit(code)


def _given(ctx: click.Context, name: str) -> bool:
    """Whether option ``name`` was given (not left to its default)."""
    return ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)


def _approval_service(spec: str, given: bool = True) -> tuple[ApprovalService, TerminalPrompt]:
    """The service for ``--approvals``, and the terminal prompt it may ask through.

    ``ask`` needs a terminal: without one the run would refuse every tool it should have asked
    about, so it stops here with a usage error instead.  A policy file whose fallback is ``ask``
    runs anyway; what nobody can answer is refused, and the exit code says so (see _exit_code)."""
    asker = ViewPrompt()
    match spec:
        case "auto":
            return AutoApprove(), asker
        case "deny":
            return AutoDeny(), asker
        case "ask":
            from ..approvals.prompt import NoTerminalError

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
    from ..approvals.policy import RulePolicy

    try:
        return RulePolicy.from_file(path, ask=asker), asker
    except OrchestrateError as exc:
        raise _translate(exc) from exc


def _exit_code(result: RunResult, asker: TerminalPrompt | None = None) -> int:
    """The outcome's exit code; 128 + the signal when a signal stopped the run (130 for Ctrl-C,
    143 for SIGTERM, 129 for SIGHUP); and never 0 when a permission was refused because nobody
    answered (no terminal, its input ended, the approval timed out): the run did not do what it was
    asked."""
    if result.outcome != "success":
        return _signal_exit_code() or result.cli_exit_code
    code = result.cli_exit_code
    if code == 0 and ((asker is not None and asker.unanswered) or result.approvals_timed_out):
        return EXIT_UNANSWERED
    return code


# The signals that stop a run: Ctrl-C, `kill`, a closed terminal.  The first interrupts the turn the
# agent's own way and the ladder follows; if the run has not ended after _STOP_GRACE, or at a second
# signal, every process of the run is killed at once; if even that has not ended it after
# _KILL_GRACE (our own code stuck), we exit anyway: each agent's supervisor kills its whole tree when
# our end of its control socket closes (see process/containment.py).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_STOP_GRACE = 10.0
_KILL_GRACE = 3.0
_stopped_by: list[signal.Signals] = []
_deadline: list[threading.Timer] = []


async def _run_live(
    run: Run,
    make_view: Callable[[], View],
    asker: TerminalPrompt | None = None,
    cancelled: threading.Event | None = None,
    tap: Callable[[Callable[[EntryPatch], None]], Callable[[EntryPatch], None]] | None = None,
) -> RunResult:
    """Stream ``run`` into the view ``make_view`` makes (through ``tap``, the store's recorder,
    when given); stop it on the stop signals, or when ``cancelled`` is set (``orchestrate cancel``
    from anywhere)."""
    async with run, anyio.create_task_group() as tg:
        # The view (rich, for text) is made once the agent is spawned, while it starts up.
        view = make_view()
        sink = _until_broken(tap(view.on_patch) if tap is not None else view.on_patch)
        tg.start_soon(_on_stop_signals, run, asker)
        if cancelled is not None:
            tg.start_soon(_on_cancel_from_store, run, cancelled)
        with _showing(view):
            if _is_live(view):
                tg.start_soon(view.tick)
            async for patch in run.patches():
                sink(patch)
        result = await run.wait()
        tg.cancel_scope.cancel()
    return result


async def _on_cancel_from_store(run: Run, cancelled: threading.Event) -> None:
    """`orchestrate cancel TASK` from any process: the store's flag, read by the recorder's
    heartbeat thread, stops this run as a second Ctrl-C would (no interrupt first: it was asked)."""
    while True:
        if cancelled.is_set():
            _tell("cancelled from the store (orchestrate cancel): stopping")
            run.cancel()
            return
        await anyio.sleep(0.2)


@contextlib.contextmanager
def _showing(view: View) -> Iterator[None]:
    """The view shown for as long as the run streams; the CLI's own notices go through it."""
    _views.append(view)
    try:
        if _is_live(view):
            with view:
                yield
        else:
            yield
            with contextlib.suppress(OSError):
                view.finish()
    finally:
        _views.remove(view)


async def _on_stop_signals(run: Run, asker: TerminalPrompt | None = None) -> None:
    # Not a signal we were started ignoring: `nohup orchestrate run ...` outlives its terminal, and
    # a background job of a non-interactive shell is not stopped by the Ctrl-C meant for the shell.
    wanted = [sig for sig in STOP_SIGNALS if signal.getsignal(sig) != signal.SIG_IGN]
    with anyio.open_signal_receiver(*wanted) as signals:
        async with anyio.create_task_group() as tg:
            async for sig in signals:
                _stopped_by.append(sig)
                if asker is not None:
                    asker.interrupt()  # a question on screen is answered "no, and stop the turn"
                if len(_stopped_by) == 1:
                    _tell(f"\n{_why(sig)}: interrupting (Ctrl-C again to stop now)")
                    tg.start_soon(_interrupt, run)  # not awaited: a second signal is never held up
                else:
                    _stop_now(run)


async def _interrupt(run: Run) -> None:
    try:
        await run.interrupt()
    except OrchestrateError:
        run.cancel()
    await anyio.sleep(_STOP_GRACE)
    _stop_now(run)


def _stop_now(run: Run) -> None:
    _tell("stopping now")
    run.cancel()
    kill_all()
    if not _deadline:
        _deadline.append(threading.Timer(_KILL_GRACE, _exit_now))
        _deadline[0].daemon = True  # it must not hold up a normal exit
        _deadline[0].start()


def _exit_now() -> None:
    with contextlib.suppress(OSError, ValueError):
        if any(_is_live(v) for v in _views) and sys.stdout.isatty():
            sys.stdout.write("\x1b[?25h\n")  # the live view hid the cursor; give it back
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(_signal_exit_code() or 130)


def _signal_exit_code() -> int | None:
    return 128 + _stopped_by[0] if _stopped_by else None


def _why(sig: signal.Signals) -> str:
    return {signal.SIGINT: "Ctrl-C", signal.SIGHUP: "terminal closed (SIGHUP)"}.get(sig, sig.name)


def _tell(message: str) -> None:
    # After SIGHUP the terminal may be gone: a message that cannot be shown is not an error.
    with contextlib.suppress(OSError, ValueError):
        live = next((v for v in _views if _is_live(v)), None)
        if live is not None:  # above the live region, not through it
            live.note(message.strip())
        else:
            click.echo(message, err=True)


def _until_broken(sink: Callable[[EntryPatch], None]) -> Callable[[EntryPatch], None]:
    """``sink``, until its output fails (a closed terminal, a closed pipe); then nothing, so the run
    still ends through its ladder instead of an exception that skips the exit code."""
    broken = False

    def guarded(patch: EntryPatch) -> None:
        nonlocal broken
        if not broken:
            try:
                sink(patch)
            except OSError:
                broken = True

    return guarded


class JsonlWriter:
    """``--output jsonl``: one entry patch per line (``orchestrate schema``), then one result line."""

    def __init__(self) -> None:
        self.out = sys.stdout.buffer

    def on_patch(self, patch: EntryPatch) -> None:
        self.out.write(orjson.dumps(patch.to_json_dict()) + b"\n")
        self.out.flush()

    def finish(self) -> None:
        pass

    def result(
        self, result: RunResult, exit_code: int, seconds: float, stored: dict[str, int] | None = None
    ) -> None:
        self.write(result_line(result, exit_code, seconds, stored))

    def write(self, line: dict[str, Any]) -> None:
        self.out.write(orjson.dumps(line) + b"\n")
        self.out.flush()


def result_line(
    result: RunResult, exit_code: int, seconds: float, stored: dict[str, int] | None = None
) -> dict[str, Any]:
    """The last line of ``--output jsonl``: ``{"type": "result", ...}``, told from the patches
    before it by having ``type`` and no ``op``.  ``exitCode`` is the CLI's own exit code,
    ``agentExitCode`` the agent process's; ``usage`` is null when the agent reported none;
    ``taskId``/``runId`` name the task and run the store recorded it as (null when not recorded);
    ``error`` is why it failed in one line, and ``errorKind`` which of the reasons a person can act
    on it is (``model_unreachable``, ``rate_limited``, ``auth_required``, ``cli_missing``) or null."""
    from .failure import classify

    usage = result.reported_usage
    failure = classify(result)
    return {
        "type": "result",
        "outcome": result.outcome,
        "exitCode": exit_code,
        "agentExitCode": result.exit_code,
        "sessionId": result.session_id,
        "error": failure.line if failure is not None else result.error,
        "errorKind": failure.kind if failure is not None else None,
        "usage": usage.to_json_dict() if usage is not None else None,
        "costUsd": usage.total_cost_usd if usage is not None else None,
        "durationMs": round(seconds * 1000),
        "rawLog": str(result.raw_log) if result.raw_log else None,
        "taskId": (stored or {}).get("taskId"),
        "runId": (stored or {}).get("runId"),
    }


def not_started_line(error: str, kind: str | None, exit_code: int) -> dict[str, Any]:
    """The result line of a run that could not start (its CLI missing, a bad option)."""
    return {
        "type": "result",
        "outcome": "failed",
        "exitCode": exit_code,
        "agentExitCode": None,
        "sessionId": None,
        "error": error,
        "errorKind": kind,
        "usage": None,
        "costUsd": None,
        "durationMs": 0,
        "rawLog": None,
        "taskId": None,
        "runId": None,
    }


if TYPE_CHECKING:
    View = TextRenderer | JsonlWriter
_views: list[View] = []  # the view of the run under way, for the CLI's own notices


def _is_live(view: object) -> TypeGuard[LiveView]:
    """Whether ``view`` is the live view.  One exists only once its module is loaded, which a run
    with JSON lines never needs (it loads rich)."""
    live = sys.modules.get(f"{__package__}.live")
    return live is not None and isinstance(view, live.LiveView)


def _view_maker(output: str, verbose: bool, asker: TerminalPrompt | None = None) -> Callable[[], View]:
    """What :func:`_view` will make, made when called."""
    return lambda: _view(output, verbose, asker)


def _view(output: str, verbose: bool, asker: TerminalPrompt | None = None) -> View:
    """JSON lines; or a live view when stdout is a terminal that can take one (not TERM=dumb); or
    plain lines, with no control codes, for a pipe or a file.  NO_COLOR is honoured by rich."""
    if output == "jsonl":
        return JsonlWriter()
    from rich.console import Console

    from ..normalizers.base import DEFAULT_WINDOW  # (loaded with the run's normalizer by now)
    from .live import LiveView
    from .render import TextRenderer

    console = Console(highlight=False)
    # The runs of the commands that make a view stream (Run(..., streaming=True)): the view
    # forgets entries as their normalizer does.
    if not console.is_interactive:
        return TextRenderer(console, verbose, DEFAULT_WINDOW)
    view = LiveView(console, verbose, window=DEFAULT_WINDOW)
    if isinstance(asker, ViewPrompt):
        asker.view = view  # its questions hold the view still
    return view


def _finish(
    output: str,
    result: RunResult,
    asker: TerminalPrompt,
    seconds: float,
    stored: dict[str, int] | None = None,
) -> None:
    code = _exit_code(result, asker)
    if output == "jsonl":
        with contextlib.suppress(OSError):
            JsonlWriter().result(result, code, seconds, stored)
    else:
        _summary(result)
    sys.exit(code)


def _summary(result: RunResult) -> None:
    from rich.console import Console
    from rich.text import Text

    from .failure import classify
    from .render import usage_summary

    console = Console(stderr=True, highlight=False)
    style = {"success": "green", "interrupted": "yellow", "cancelled": "yellow"}.get(result.outcome, "red")
    line = Text.assemble("\n", (result.outcome, style), f"  session {result.session_id or '-'}")
    line.append(f"  {usage_summary(result.reported_usage)}")
    line.append(f"  raw log {result.raw_log}")
    console.print(line, soft_wrap=True)
    failure = classify(result)
    if failure is not None:
        console.print(Text(failure.line, style="red"), soft_wrap=True)
    elif result.outcome != "success" and result.error:
        console.print(Text(result.error, style="red"), soft_wrap=True)


@main.command()
@click.option(
    "--approvals", default="auto", show_default=True, help="auto | deny | ask | PATH to a policy file."
)
@click.option("--output", type=click.Choice(["text", "jsonl"]), default="text", show_default=True)
@click.option("--verbose", "-v", is_flag=True, help="Whole outputs, the agent's own tool names.")
def demo(approvals: str, output: str, verbose: bool) -> None:
    """Run the real Claude Code CLI on an embedded task against a scripted local model (no API key)."""
    service, asker = _approval_service(approvals, _given(click.get_current_context(), "approvals"))
    began = time.monotonic()
    try:
        executor = default_registry.create("claude-code")
        from ..testing.demo import demo_task

        with demo_task() as task:
            view = _view_maker(output, verbose, asker)
            result = anyio.run(_run_live, Run(executor, task, service, streaming=True), view, asker)
    except OrchestrateError as exc:
        raise _translate(exc) from exc
    finally:
        asker.close()
    _finish(output, result, asker, time.monotonic() - began)


# --- executors, replay, schema ------------------------------------------------------------------


@main.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object per executor.")
def executors(as_json: bool) -> None:
    """List executors: protocol, installed version, capabilities."""
    rows = anyio.run(_availability)
    if as_json:
        click.echo(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
        return
    from rich.console import Console
    from rich.table import Table

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
@click.argument("target")
@click.option(
    "--executor",
    "-e",
    "executor_name",
    help="Whose log it is (default: the executor named in the log's header).",
)
@click.option("--output", type=click.Choice(["text", "jsonl"]), default="text", show_default=True)
@click.option(
    "--store",
    "store_url",
    envvar="ORCHESTRATE_STORE",
    help="Where to look up a run id (default: SQLite under $ORCHESTRATE_HOME).",
)
@click.option("--verbose", "-v", is_flag=True, help="Whole outputs, the agent's own tool names.")
def replay_cmd(
    target: str, executor_name: str | None, output: str, store_url: str | None, verbose: bool
) -> None:
    """Normalize TARGET: a raw log of ours, a plain stdout capture of the CLI (give --executor), or
    the id of a stored run (`orchestrate show` lists them).  Exits 1 if some lines of the log could
    not be read (each is an error entry; the rest is replayed)."""
    from rich.console import Console

    from ..entries import ErrorEntry
    from ..normalizers.base import DEFAULT_WINDOW
    from ..process.rawlog import DAMAGED, read_raw_log
    from ..replay import normalizer_for_file, replay
    from .render import TextRenderer

    file = _replay_file(target, store_url)
    try:
        header, _ = read_raw_log(file)
        name = executor_name or (header or {}).get("executor")
        if not isinstance(name, str):
            raise CliError(f"{file} is a plain capture with no header: say whose with --executor", EXIT_USAGE)
        normalizer = normalizer_for_file(file, default_registry.get(name)())
        view: View = JsonlWriter()
        if output != "jsonl":  # (a streaming replay: its normalizer keeps the default window)
            view = TextRenderer(Console(highlight=False), verbose, DEFAULT_WINDOW)
        damaged: set[int] = set()  # the damage notes, counted as they pass (no entry is kept)
        for patch in replay(file, normalizer, streaming=True):
            view.on_patch(patch)
            kind = patch.entry.type
            if isinstance(kind, ErrorEntry) and kind.error.code == DAMAGED:
                damaged.add(patch.index)
        view.finish()
    except OrchestrateError as exc:
        raise _translate(exc) from exc
    # A damaged line is an entry and the rest is replayed; the exit code still tells a script.
    if damaged:
        click.echo(f"{file}: {len(damaged)} line(s) could not be read and were skipped", err=True)
        sys.exit(1)


def _replay_file(target: str, store_url: str | None) -> Path:
    """The raw log ``target`` names: a file, or a stored run's id."""
    path = Path(target)
    if path.is_file():
        return path
    if not target.isdigit():
        raise CliError(f"{target}: no such file, and not a run id", EXIT_USAGE)
    from ..store import Store  # only when a run is looked up: the store is not on run's path
    from ..store.errors import NotFoundError

    try:
        with Store.open(store_url) as store:
            record = store.run(int(target))
    except NotFoundError as exc:
        raise CliError(f"no run {target} in the store", EXIT_USAGE) from exc
    except OrchestrateError as exc:
        raise _translate(exc) from exc
    if not record.raw_log or not Path(record.raw_log).is_file():
        raise CliError(
            f"run {target} has no raw log on this machine ({record.raw_log or 'none kept'})", EXIT_USAGE
        )
    return Path(record.raw_log)


@main.command()
@click.option("--contract", is_flag=True, help="The whole JSON contract (capabilities, approvals too).")
@click.option("--typescript", is_flag=True, help="TypeScript declarations of the contract instead.")
def schema(contract: bool, typescript: bool) -> None:
    """Print the JSON Schema of one entry patch (the lines of `--output jsonl`)."""
    if typescript:
        from ..contract.typescript import generate

        click.echo(generate(), nl=False)
        return
    if contract:
        from ..contract import contract_json_schema

        click.echo(orjson.dumps(contract_json_schema(), option=orjson.OPT_INDENT_2).decode())
        return
    from ..entries import entry_json_schema

    click.echo(orjson.dumps(entry_json_schema(), option=orjson.OPT_INDENT_2).decode())


# --- warm: everything loaded once, each run a fork of it ------------------------------------------


@main.command()
@click.option(
    "--socket",
    "socket_file",
    type=click.Path(dir_okay=False),
    help="Listen here (default: $ORCHESTRATE_WARM_SOCKET, else orchestrate/warm.sock in "
    "$XDG_RUNTIME_DIR or /tmp/orchestrate-UID).",
)
@click.option(
    "--idle",
    type=float,
    default=3600.0,
    show_default=True,
    help="Stop after this many seconds without a run (0: never).",
)
@click.option("--status", is_flag=True, help="Say whether a server listens there (exit 1 if none).")
@click.option("--stop", is_flag=True, help="Stop the server that listens there (its runs get SIGTERM).")
def warm(socket_file: str | None, idle: float, status: bool, stop: bool) -> None:
    """Keep everything a run needs loaded: each `orchestrate run` then starts as a fork of this.

    \b
    The run's first entry comes as soon as the agent's: nothing is loaded after it starts.  Runs
    are handed over by the command on its own (ORCHESTRATE_WARM=0: never); a changed installation
    stops the server, and the commands run cold.  Stopped by Ctrl-C, SIGTERM, SIGHUP or --stop:
    running runs get SIGTERM."""
    from .warm import socket_path
    from .warm_server import WarmServer, listening, stop_server

    path = str(Path(socket_file).absolute()) if socket_file else socket_path()
    if status or stop:
        pid = listening(path)
        if pid is None:
            click.echo(f"no warm server listens on {path}", err=True)
            sys.exit(1)
        if stop:
            sys.exit(0 if stop_server(path, pid) else 1)
        click.echo(f"warm server {pid} listens on {path}")
        return
    sys.exit(WarmServer(path=path, idle=idle or None).run())


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
    from ..testing.model_server import ScriptedModelServer
    from ..testing.scenario import Scenario

    try:
        server = ScriptedModelServer(Scenario.load(scenario), log_path=log_path, port=port)
    except OrchestrateError as exc:
        raise _translate(exc) from exc
    with server:
        if port_file is not None:
            port_file.write_text(str(server.port))
        click.echo(f"scripted model on {server.url}", err=True)
        # Block the signals and wait for one, so either ends the server cleanly.
        stop = set(STOP_SIGNALS)
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
    from ..testing.recording import FIXTURE_FOLDERS

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
    from ..testing.recording import record_case

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
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=None,
    help="Cells run at once (default 2: each keeps about one core busy).",
)
def conformance(
    executor_names: tuple[str, ...], as_json: bool, require_installed: bool, jobs: int | None
) -> None:
    """Run the conformance scenarios on every installed real CLI against the scripted model."""
    from ..testing.conformance import JOBS, run_conformance

    try:
        cells = anyio.run(run_conformance, list(executor_names) or None, None, jobs or JOBS)
    except OrchestrateError as exc:
        raise _translate(exc) from exc
    if as_json:
        click.echo(orjson.dumps([c.__dict__ for c in cells], option=orjson.OPT_INDENT_2).decode())
    else:
        _print_matrix(cells)
    bad = {"fail"} | ({"not installed"} if require_installed else set())
    sys.exit(1 if any(c.verdict in bad for c in cells) else 0)


def _print_matrix(cells: list[Cell]) -> None:
    from rich.console import Console
    from rich.table import Table

    from ..testing.conformance import SCENARIOS

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
    from ..testing.upgrade import upgrade as run_upgrade

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
