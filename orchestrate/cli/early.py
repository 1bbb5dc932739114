"""The ``orchestrate`` command's entry point: ``orchestrate run`` starts its agent first.

A Node CLI takes a few hundred milliseconds to start, and so does loading the CLI, pydantic, anyio
and the run before we could spawn it: one after the other, the agent's first entry came that much
later than from the CLI alone.  Here, before any of that is imported, a plain ``orchestrate run``
spawns its agent's supervisor at once (process/prestart.py's ``standby``: its interpreter starts
while we go on), has the agent's command line and environment built by the executor's own code
(``process_spec``, the same that the run calls; executors/base.py imports neither pydantic nor
anyio), and sends them to the supervisor, which starts the agent, contained.  A supervisor that is
sent nothing (the early start does not apply after all) exits having started nothing.  The CLI then
loads and checks everything as it always did, and the run adopts the process (:meth:`Run.adopt
<orchestrate.run.handle.Run.adopt>`) only if it was started with exactly the command line, directory
and environment the run computed itself; else, and when the options are refused, the agent is killed
(before it has been sent anything, unless its first message was written early: below).

Only what this module is sure to read the way click does is started early: the options below, one
PROMPT (not ``-``), an executor of ours over pipes whose ``prepare`` and ``policy_args`` are the
defaults, and not ``--approvals ask`` (the default) without a terminal to ask on, which the full
path refuses at once.  Anything else (a policy file, ``--interactive``, a workspace, ``-c``,
``--mcp-config``, ``--help``, an option this module does not know) takes the ordinary path,
unchanged.  ``ORCHESTRATE_EARLY=0`` turns the early start off.

With ``ORCHESTRATE_EARLY=write``, and where the agent asks us before every tool that changes
anything (Claude Code over our stdio permission prompt tool, in its default mode, nothing in its
options, environment or settings that lets it act without asking: run/early_opening.py), its first
message is written right after the spawn too, by the driver's own code, since Claude Code prints
nothing before it has read one: the run that adopts the process records those bytes as its own.
That trades away "a refused run's agent never receives a prompt": a run refused after the early
write kills its agent at once, whole tree, and says so on stderr; whatever the agent asked meanwhile
waits, unanswered, for the run's approval pipeline.  It is not the default: measured on a quiet
2-core machine it gained nothing over the run's own write (bench/README.md, *Time to first entry*:
the run writes the prompt before Claude Code is ready to read it), and the trade rests on knowing
everything that lets the CLI act unasked.

A handshake that carries no prompt is written by default: Codex's app-server and every ACP agent
answer nothing before ``initialize`` (the client's name and capabilities, nothing to be done), so
it is sent right after the spawn, by the driver's own code, and answered while the run loads
(run/early_opening.py).  ``ORCHESTRATE_EARLY=1``
(the default, and any value not named here) starts the agent early and writes only that;
``ORCHESTRATE_EARLY=spawn`` writes nothing at all; ``0`` (or ``off``, ``false``, ``no``) turns the
early start off.
"""

from __future__ import annotations

import os
import sys

# What the interpreter had loaded when the command began (its site's doing: a sitecustomize, .pth
# files): `orchestrate warm` vouches for every module loaded after, by us (cli/warm_server.py).
AT_START = frozenset(sys.modules)

from ..process.record import Record  # noqa: E402
from . import pause_collector, resume_collector  # noqa: E402

# Neither typing nor pathlib (with re, fnmatch, urllib.parse, ipaddress) before the spawn: ~3 and
# ~5 ms of every start; os.path does what this module needs.  mypy takes any TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..executors.base import Executor
    from ..executors.options import ExecutorOptions
    from ..process.prestart import Prestarted, Standby
    from ..process.spec import ProcessSpec
    from ..task import Task

__all__ = [
    "AT_START",
    "EARLY_ENV",
    "KILLED_AFTER_WRITE",
    "OFF",
    "command",
    "discard",
    "early_spec",
    "main",
    "prompted",
    "take",
]

EARLY_ENV = "ORCHESTRATE_EARLY"
KILLED_AFTER_WRITE = (
    "orchestrate: the agent started early had been sent the prompt, and the run did not take it "
    "over ({why}): it was killed, with every process it started"
)

# `run`'s options that take a value, by the name of the parameter that matters here (None: it does
# not change the command line; the full path checks its value).
_VALUED: dict[str, str | None] = {
    "-e": "executor",
    "--executor": "executor",
    "--cwd": "cwd",
    "--model": "model",
    "--approvals": "approvals",
    "--approval-timeout": "approval_timeout",
    "--resume": "resume",
    "--permission-mode": "permission_mode",
    "--base-command": "base_command",
    "--command": "base_command",
    "--env": "env",
    "--timeout": "timeout",
    "--startup-timeout": "startup_timeout",
    "--output": "output",
    "--record": "record",
}
_FLAGS: dict[str, str | None] = {
    "--fork": "fork",
    "--resume-fallback": None,
    "--no-redact": None,
    "--verbose": None,
    "-v": None,
}


class _Options(Record):
    """:class:`ExecutorOptions`' fields with their defaults (a test holds them equal), without
    pydantic (nor dataclasses, whose import costs the spawn ~15 ms: process/record.py): what
    ``build_argv`` reads."""

    __slots__ = (  # noqa: RUF023 - the fields in the constructor's order
        "model",
        "permission_mode",
        "base_command",
        "extra_args",
        "env",
        "sandbox",
        "approval_policy",
        "config",
        "mcp_servers",
        "stable_seconds",
    )
    model: str | None
    permission_mode: str | None
    base_command: str | list[str] | None
    extra_args: list[str]
    env: dict[str, str]
    sandbox: str | None
    approval_policy: str | None
    config: dict[str, Any]
    mcp_servers: dict[str, dict[str, Any]]
    stable_seconds: float | None

    def __init__(
        self,
        model: str | None = None,
        permission_mode: str | None = None,
        base_command: str | list[str] | None = None,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
        sandbox: str | None = None,
        approval_policy: str | None = None,
        config: dict[str, Any] | None = None,
        mcp_servers: dict[str, dict[str, Any]] | None = None,
        stable_seconds: float | None = None,
    ) -> None:
        self.model = model
        self.permission_mode = permission_mode
        self.base_command = base_command
        self.extra_args = [] if extra_args is None else extra_args
        self.env = {} if env is None else env
        self.sandbox = sandbox
        self.approval_policy = approval_policy
        self.config = {} if config is None else config
        self.mcp_servers = {} if mcp_servers is None else mcp_servers
        self.stable_seconds = stable_seconds


class _Task(Record):
    """The fields of :class:`Task` a command line is built from, as ``run`` fills them.  A field
    not here that an executor reads raises AttributeError: no early start then."""

    __slots__ = ("prompt", "cwd", "model", "resume", "fork", "env")  # noqa: RUF023
    prompt: str
    cwd: str
    model: str | None
    resume: str | None
    fork: bool
    env: dict[str, str]

    def __init__(
        self,
        prompt: str,
        cwd: str,
        model: str | None = None,
        resume: str | None = None,
        fork: bool = False,
        env: dict[str, str] | None = None,
    ) -> None:
        self.prompt = prompt
        self.cwd = cwd
        self.model = model
        self.resume = resume
        self.fork = fork
        self.env = {} if env is None else env


def _parse(args: list[str]) -> dict[str, Any] | None:
    """``run``'s arguments as click would read them, or None for anything this module does not
    read with certainty."""
    if not args or args[0] != "run":
        return None
    given: dict[str, Any] = {"env": []}
    prompts: list[str] = []
    rest = iter(args[1:])
    for arg in rest:
        if arg.startswith("-") and arg != "-":
            name, eq, value = arg.partition("=")
            if name in _VALUED and (not eq or name.startswith("--")):
                if not eq:
                    value = next(rest, None)  # type: ignore[assignment]  # None: checked below
                    if value is None:
                        return None
                key = _VALUED[name]
                if key == "env":
                    given["env"].append(value)
                elif key is not None:
                    given[key] = value  # the last one given wins, as in click
            elif arg in _FLAGS:
                key = _FLAGS[arg]
                if key is not None:
                    given[key] = True
            else:
                return None  # `--`, -h, a short option with its value attached, one we do not know
        else:
            prompts.append(arg)
    if len(prompts) != 1 or prompts[0] == "-" or not prompts[0].strip() or "executor" not in given:
        return None
    if given.get("approvals", "ask") == "ask" and not _has_terminal():
        return None  # refused at once by the full path (a usage error): nothing to start
    if not _acceptable(given):
        return None
    given["prompt"] = prompts[0]
    return given


def _acceptable(given: dict[str, Any]) -> bool:
    """Whether the options the command line does not depend on pass the checks click and the full
    path make before anything starts.  An agent may run code before it reads a byte (Claude Code
    runs the project's SessionStart hooks at start-up), so a run refused for a mistyped policy file
    or a bad timeout must not have started one; nor may a run with a policy file, whose content
    only the full path reads."""
    try:
        if not float(given.get("approval_timeout", 600)) > 0:  # Task's own bound
            return False
        for name in ("timeout", "startup_timeout"):
            if not float(given.get(name, 0)) >= 0:
                return False
    except ValueError:
        return False
    if given.get("output", "text") not in ("text", "jsonl"):
        return False
    record = given.get("record")
    if record is not None and os.path.isdir(record or "."):  # noqa: PTH112  # ("" is Path("."))
        return False  # refused by click (the raw log makes missing parent directories itself)
    # A policy file's content is checked by the full path alone (its loader and the shell parser
    # are what the early start exists to run beside): a file that is not a valid policy would have
    # started the agent (and its hooks) for a run then refused, so a policy file starts late.
    return given.get("approvals", "ask") in ("auto", "deny", "ask")


def _has_terminal() -> bool:
    """Whether ``--approvals ask`` has a terminal to ask on, as the terminal prompt decides
    (approvals/prompt.py): ``/dev/tty`` opens, or stdin is a terminal."""
    try:
        from ..process.tty import open_terminal

        os.close(open_terminal())
    except OSError:
        return os.isatty(0)
    return True


def early_spec(args: list[str]) -> ProcessSpec | None:
    """The agent's command line, directory and environment for ``orchestrate ARGS...``, built by its
    executor's own ``process_spec``; None when the early start does not apply."""
    early = _early(args)
    return None if early is None else early[1]


def _early(args: list[str]) -> tuple[Executor, ProcessSpec, str] | None:
    """The executor, its process spec and the prompt of ``orchestrate ARGS...``, or None."""
    given = _parse(args)
    return None if given is None else _built(given)


def _built(given: dict[str, Any]) -> tuple[Executor, ProcessSpec, str] | None:
    """The executor, its process spec and the prompt of ``run``'s arguments as :func:`_parse`
    read them, or None."""
    from ..executors.base import Executor
    from ..process.env import parse_env_overrides
    from ..registry import default_registry

    name = given["executor"]
    if default_registry.sources.get(name) != "builtin":  # a plugin loads with the rest
        return None
    cls = default_registry.get(name)
    if cls.transport != "pipes" or cls.prepares(given.get("resume")):
        return None
    if cls.policy_args is not Executor.policy_args:  # it depends on the approval service
        return None
    cwd = given.get("cwd") or os.getcwd()  # noqa: PTH109
    if not os.path.isdir(cwd):  # noqa: PTH112
        return None
    options = _Options(
        model=given.get("model"),
        permission_mode=given.get("permission_mode"),
        base_command=given.get("base_command"),
    )
    task = _Task(
        prompt=given["prompt"],
        cwd=os.path.realpath(cwd),  # Path.resolve's own (a loop is not a directory: above)
        resume=given.get("resume"),
        fork=given.get("fork", False),
        env=parse_env_overrides(given["env"]),
    )
    # The stand-ins have the fields process_spec reads (typing.cast would import typing: above).
    as_options: ExecutorOptions = options  # type: ignore[assignment]
    as_task: Task = task  # type: ignore[assignment]
    executor = cls(as_options)
    return executor, executor.process_spec(as_task, None), task.prompt


_pending: list[Prestarted] = []
_standing: list[Standby] = []

# The built-in executors whose runs may start early (over pipes, nothing prepared, no policy
# arguments: what _built checks, once their code is loaded), known before it is: a run of any
# other (cursor, the terminal ones) must not spawn a supervisor only to end it, which cost it the
# supervisor's start and exit, waited for (~35 ms), before it went on.  Those in
# _EARLY_UNLESS_RESUMED prepare files for a resumed session only (Gemini's session file): their
# new sessions start early.  A test holds both equal to what the registry's classes say.
_EARLY_EXECUTORS = frozenset(
    (
        "acp",
        "claude-code",
        "claude-code-acp",
        "codex",
        "codex-acp",
        "codex-exec",
        "copilot",
        "cursor-acp",
        "droid",
        "gemini",
        "opencode",
        "qwen",
    )
)
_EARLY_UNLESS_RESUMED = frozenset(("gemini",))
# ORCHESTRATE_EARLY's ways of saying no (any case): `off` or `false` meaning "on" would surprise.
OFF = frozenset(("0", "off", "false", "no", "none"))  # a switch's values that turn it off
# The protocols whose agents may be sent a handshake (run/early_opening.py's early_handshake says
# which exactly, and tests/test_early_handshake.py holds it within these).
_HANDSHAKE_PROTOCOLS = frozenset(("acp", "jsonrpc"))


def begin(args: list[str], *, keep_code: bool = False) -> Prestarted | None:
    """Start the agent of ``orchestrate ARGS...`` now, if the early start applies.

    ``keep_code``: the command's own process (:func:`main`) installs cli/code_cache.py once the
    agent is on its way; a caller of this in its own process (tests do) keeps its exec and compile.

    Its supervisor is spawned first, as soon as the arguments read as a ``run`` that may start
    early and before the executor's code is even loaded: its interpreter starts while we build the
    agent's command line, directory and environment, which are then sent to it.  If the early
    start does not apply after all, it is told nothing and exits, having started nothing."""
    mode = os.environ.get(EARLY_ENV, "1").strip().lower()
    if mode in OFF:
        return None
    try:
        given = _parse(args)
    except Exception:  # anything at all: the ordinary path says what is wrong
        return None
    if given is None:  # before any import: every other command goes on at once
        return None
    name = given["executor"]
    if name not in _EARLY_EXECUTORS or (name in _EARLY_UNLESS_RESUMED and given.get("resume")):
        return None  # it would be spawned only to be ended
    from ..process.prestart import standby

    waiting = standby()
    if waiting is None:
        return None
    # Ended by discard() if we are interrupted (Ctrl-C) before it is told, while it is told, or
    # before what it started is in _pending: kept there until then.
    _standing.append(waiting)
    try:
        early = _built(given)
    except Exception:
        early = None
    if early is None:
        waiting.discard()
        _standing.remove(waiting)
        return None
    executor, spec, prompt = early
    started = waiting.start(spec)
    if started is not None:
        _pending.append(started)
    _standing.remove(waiting)
    if started is None:
        return None
    if keep_code:  # (now that the agent is on its way: it loads dataclasses and typing)
        from . import code_cache

        code_cache.install()
    if mode != "spawn":
        _write_first(started, executor, prompt, mode == "write")
    return started


def _write_first(started: Prestarted, executor: Executor, prompt: str, with_prompt: bool) -> None:
    """Send the agent its handshake now, if it takes one (Codex's app-server, an ACP agent); or,
    ``with_prompt``, its first message, if it asks before every tool that changes anything
    (run/early_opening.py): the lines the run's driver would write first, made by its code."""
    if not with_prompt and (executor.driver or executor.protocol) not in _HANDSHAKE_PROTOCOLS:
        return  # (nothing to write: a Claude run does not even load the module that decides)
    try:
        from ..run.early_opening import early_handshake, early_opening

        opening: object = early_handshake(executor)
        if opening is None and with_prompt:
            opening = early_opening(executor, started.spec, prompt)
    except Exception:  # the run writes them itself, as it always did
        return
    lines = getattr(opening, "lines", None)
    if type(lines) is not tuple:  # none, or why not (a str)
        return
    if not started.write(lines, opening) and started.was_written:
        discard("the first message could not be written whole")  # the run starts its own agent


def take() -> Prestarted | None:
    """The agent started early, for the run to adopt (once)."""
    return _pending.pop() if _pending else None


def discard(why: str = "the run was refused") -> None:
    """End an early start nobody adopted (the options were refused, or another command ran); one
    that had been sent its prompt says so on stderr."""
    while _standing:
        _standing.pop().discard()
    while _pending:
        started = _pending.pop()
        started.discard()
        if prompted(started):
            say_killed(why)


def prompted(started: Prestarted) -> bool:
    """Whether the agent started early was sent (even in part) its prompt, as opposed to nothing
    or only a handshake (which is not worth a word when it is killed: it was told nothing of the
    person's)."""
    return started.was_written and getattr(started.opening, "prompt", None) is not None


def say_killed(why: str) -> None:
    """Tell the person that an agent which had read its prompt was killed unadopted."""
    try:
        sys.stderr.write(KILLED_AFTER_WRITE.format(why=why) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # no stderr to say it on: the agent is dead all the same
        pass


def main() -> None:
    """``orchestrate``: handed to a warm server if one is there (cli/warm.py; it exits for us), else
    the early start, then the click command."""
    from .warm import hand_over

    hand_over(sys.argv[1:])
    command(sys.argv[1:], keep_code=True)


def command(args: list[str], *, keep_code: bool) -> None:
    """``orchestrate ARGS...`` in this process (``sys.argv`` says the same): the early start, then the
    click command.  ``keep_code``: the compiled code is kept (cli/code_cache.py); not in a warm
    server's run, which has everything loaded already."""
    pause_collector()  # while the command loads (cli/__init__.py), resumed by the run or below
    try:
        begin(args, keep_code=keep_code)
        if keep_code:
            from . import code_cache  # (not before: ~3 ms a warm server's command does not spend)

            code_cache.install()
        from .main import main as cli

        cli()
    except KeyboardInterrupt:
        # Ctrl-C while the CLI loads (click's own handling starts later): no traceback, and an
        # agent started early is said to be killed for that, not for a refusal.
        discard("interrupted")
        sys.exit(130)
    finally:
        discard()
        resume_collector()
