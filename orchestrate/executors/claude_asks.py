"""Whether a Claude Code process asks us before every tool that changes anything.

The CLI's early start (cli/early.py) writes the first message to a Claude Code process before the
run has adopted it, a few hundred milliseconds before the run could (bench/first_entry.py).  The
run may still be refused then (an option only the full path checks, a spec that differs), and its
agent is killed; what it must not have done meanwhile is change anything.  Claude Code over
``--permission-prompt-tool stdio`` asks its host (``can_use_tool``) before every tool that is not
read-only, and waits: before adoption the question waits in the pipe, unanswered, and after it
goes through the run's whole approval pipeline, as any other.  That holds only while nothing lets
the CLI act without asking, so the early write is made only when all of these hold:

- the command line is the executor's own program with exactly the options the executor builds,
  ``--permission-prompt-tool stdio`` among them, and a permission mode of ``default`` (or its
  alias ``manual``) if any: no ``--base-command`` (a wrapper's own options cannot be seen), no
  bypass or skip-permissions option, no ``acceptEdits``, ``auto``, ``dontAsk`` or ``plan`` mode, no
  allowed-tools list, no extra option of any kind;
- no ``CLAUDE...`` variable in its environment but the few known not to touch asking
  (:data:`_KNOWN_VARIABLES`: ours, the model provider's, the config directory, output limits):
  the CLI reads over a thousand, some loosen it (``CLAUDE_CODE_EVEN_MORE_DANGEROUSLY_SKIP_PERMISSIONS``)
  and others may (``CLAUDE_CODE_DISABLE_INLINE_SHELL_RM_PROMPT``), so an unknown one costs the early
  write, never the other way round (``IS_SANDBOX`` only matters with a bypass mode, refused above);
- every settings file the CLI reads that we can see (the user's, found where the CLI finds it: a
  relative ``$HOME`` or ``$CLAUDE_CONFIG_DIR`` from its working directory, the account's home
  without ``$HOME``; ``.claude/settings.json`` and ``settings.local.json`` in the working
  directory and each of its parents, the machine's managed
  settings in ``/etc/claude-code``) is a JSON object with no ``allow`` rules, no default mode but
  ``default``, no hooks (a ``PreToolUse`` hook can allow a tool itself; a ``UserPromptSubmit`` one
  runs a command on the prompt), no plugins (they bring hooks), no sandbox settings (a sandboxed
  Bash command may be allowed without asking) and no such variable in its ``env``.  A file that
  cannot be read or parsed counts against it.

Not seen, and so not covered: settings an organization serves to the CLI over the network, and a
``claude`` on the PATH that is itself a wrapper adding options.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import orjson

from .claude_code import UNASKED_TOOLS

__all__ = ["always_asks"]

_PROMPT_TOOL = ("--permission-prompt-tool", "stdio")
_BARE = frozenset({"--verbose", "--include-partial-messages", "--fork-session"})
_FIXED = {
    "--disallowedTools": UNASKED_TOOLS,  # (what it runs without asking: claude_code.py)
    "--input-format": "stream-json",
    "--output-format": "stream-json",
    "--permission-prompt-tool": "stdio",
}
_ASKING_MODES = frozenset({"default", "manual"})
_KNOWN_VARIABLES = frozenset(
    {
        "CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS",  # ours (executors/claude_code.py)
        "CLAUDE_CONFIG_DIR",  # where the settings checked below are
        "CLAUDE_CODE_OAUTH_TOKEN",
        "CLAUDE_CODE_USE_BEDROCK",
        "CLAUDE_CODE_USE_VERTEX",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS",
        "CLAUDE_CODE_MAX_RETRIES",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
        "CLAUDE_CODE_DISABLE_TERMINAL_TITLE",
        "CLAUDE_CODE_ENTRYPOINT",
    }
)
"""``CLAUDE...`` variables an early write allows: none of them touches asking."""
_MANAGED = Path("/etc/claude-code")
_MAX_SETTINGS_BYTES = 1 << 20


def always_asks(argv: list[str], env: dict[str, str], cwd: Path, program: str | None) -> str | None:
    """None when the Claude Code process ``argv`` (started in ``cwd`` with ``env``; ``program``: the
    executor's own program, None when the base command was given) asks us before every tool that
    changes anything, as far as we can see; else why not."""
    if program is None or not argv or argv[0] != program:
        return "the agent's command is not the executor's own program"
    reason = _options(argv[1:])
    if reason is None:
        reason = _environment(env, "the environment")
    if reason is None:
        reason = _all_settings(env, cwd)
    return reason


def _options(args: list[str]) -> str | None:
    words = iter(args)
    seen_prompt_tool = False
    for word in words:
        if word in _BARE:
            continue
        if word.startswith("--resume=") and len(word) > len("--resume="):
            continue
        if word in ("--model", "--permission-mode") or word in _FIXED:
            value = next(words, None)
            if value is None:
                return f"{word} has no value"
            if word in _FIXED and value != _FIXED[word]:
                return f"{word} {value}"
            if word == "--permission-mode" and value not in _ASKING_MODES:
                return f"--permission-mode {value} lets it act without asking"
            if word == "--model" and value.startswith("-"):
                return f"--model {value}"
            seen_prompt_tool = seen_prompt_tool or (word, value) == _PROMPT_TOOL
            continue
        return f"{word!r}: an option not known to keep it asking"
    if "--disallowedTools" not in args:
        return f"no --disallowedTools {UNASKED_TOOLS}"
    return None if seen_prompt_tool else "no --permission-prompt-tool stdio"


def _environment(env: dict[str, Any], where: str) -> str | None:
    for name in env:
        upper = str(name).upper()
        if upper.startswith("CLAUDE") and upper not in _KNOWN_VARIABLES:
            return f"{name} in {where}: a variable not known to keep it asking"
    return None


def _all_settings(env: dict[str, str], cwd: Path) -> str | None:
    # Without $HOME the CLI's home is the account's; a relative $HOME or $CLAUDE_CONFIG_DIR is
    # relative to the CLI's working directory, not to ours.
    home = env.get("HOME") or _account_home()
    config = env.get("CLAUDE_CONFIG_DIR") or (str(Path(home) / ".claude") if home else None)
    files: list[Path] = []
    if config:
        config_dir = cwd / config
        files += [config_dir / "settings.json", config_dir / "settings.local.json"]
    folders = [cwd, *cwd.parents]
    main = _main_worktree(folders)
    if isinstance(main, str):
        return main
    for folder in folders if main is None else [*folders, main]:
        files += [folder / ".claude" / "settings.json", folder / ".claude" / "settings.local.json"]
    files.append(_MANAGED / "managed-settings.json")
    try:
        files += sorted((_MANAGED / "managed-settings.d").glob("*.json"))
    except OSError:
        return f"{_MANAGED / 'managed-settings.d'} cannot be read"
    for path in files:
        reason = _settings(path)
        if reason is not None:
            return reason
    return None


def _main_worktree(folders: list[Path]) -> Path | str | None:
    """The main work tree of the git work tree the folders (a directory, then its parents) are in,
    when it is another (a linked worktree: the CLI reads the local settings there, not only in
    the directory and its parents); None when there is none; a string when it cannot be told."""
    for folder in folders:
        dot_git = folder / ".git"
        if dot_git.is_dir():
            return None
        if not dot_git.exists():
            continue
        try:
            line = dot_git.read_text(errors="replace").strip()
            if not line.startswith("gitdir:"):
                return f"{dot_git} is not a git work tree link"
            git_dir = folder / line.removeprefix("gitdir:").strip()
            commondir = git_dir / "commondir"
            if not commondir.exists():
                return None  # a submodule's own repository: the folder is its root
            common = (git_dir / commondir.read_text().strip()).resolve()
        except OSError as exc:
            return f"{dot_git} cannot be read ({exc.strerror})"
        if common.name != ".git":
            return f"{folder} is a work tree of {common}, whose local settings are not known"
        return common.parent
    return None


def _account_home() -> str | None:
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_dir or None
    except KeyError:  # no account entry: no home the CLI could find either
        return None


def _settings(path: Path) -> str | None:
    try:
        # Not blocking, and only a plain file: a FIFO or a terminal would hang the start-up here.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return f"{path} is not a plain file"
            data = f.read(_MAX_SETTINGS_BYTES + 1)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None
    except OSError as exc:
        return f"{path} cannot be read ({exc.strerror})"
    if len(data) > _MAX_SETTINGS_BYTES:
        return f"{path} is too large to check"
    if not data.strip():
        return None
    try:
        settings = orjson.loads(data)
    except orjson.JSONDecodeError:
        return f"{path} is not JSON"
    if not isinstance(settings, dict):
        return f"{path} is not a JSON object"
    permissions = settings.get("permissions")
    if permissions is not None:
        if not isinstance(permissions, dict):
            return f"{path}: permissions is not an object"
        if permissions.get("allow"):
            return f"{path} allows tools without asking"
        mode = permissions.get("defaultMode")
        if mode is not None and mode not in _ASKING_MODES:
            return f"{path}: defaultMode {mode}"
    for key in ("hooks", "enabledPlugins", "sandbox"):
        if settings.get(key):
            return f"{path} has {key}"
    env = settings.get("env")
    if env is not None:
        if not isinstance(env, dict):
            return f"{path}: env is not an object"
        return _environment(env, str(path))
    return None
