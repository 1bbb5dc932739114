"""Cursor's headless agent (`cursor-agent -p --output-format stream-json`): one process per turn, the
prompt on stdin, no live approvals: the policy is fixed up front by flags."""

from __future__ import annotations

from .base import Capabilities, Executor, find_program

# Loaded before `orchestrate run -e cursor-acp` spawns its agent (cursor_acp.py finds the program
# here; cli/early.py builds the command line with process_spec): the approvals, the normalizer and
# subprocess are imported where they are used, typing not at all (~3 ms; mypy takes any
# TYPE_CHECKING as true).  tests/test_early_executors.py holds it so.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import ClassVar

    from ..approvals.base import ApprovalService
    from ..normalizers.cursor_jsonl import CursorNormalizer
    from ..task import Task

__all__ = ["CursorExecutor"]


class CursorExecutor(Executor):
    name = "cursor"
    protocol = "jsonl"
    driver = "prompt-on-stdin"
    program = "cursor-agent"
    install_hint = "Install it from cursor.com/cli (it is not on npm)."
    capabilities: ClassVar[Capabilities] = Capabilities(
        protocol="jsonl",
        session_resume=True,
        fork=False,
        approvals=False,
        mcp=True,
        mid_execution_messages=False,
        interrupt=True,
        requires_setup=True,
    )

    def base_command(self) -> list[str]:
        if self.options.base_command or find_program("cursor-agent"):
            return super().base_command()
        # Newer installs name it `agent`, a name other tools use too: only Cursor's own will do.
        found = find_program("agent")
        if found and _is_cursor(found):
            return [found]
        return super().base_command()  # raises: not found, with the install hint

    def build_argv(self, task: Task) -> list[str]:
        # --trust: an untrusted workspace would make a non-interactive run exit at once.
        argv = [
            *self.base_command(),
            "-p",
            "--output-format",
            "stream-json",
            "--stream-partial-output",
            "--trust",
        ]
        model = task.model or self.options.model
        if model:
            argv += ["--model", model]
        if self.options.permission_mode in ("plan", "ask"):
            argv += ["--mode", self.options.permission_mode]
        if task.resume:
            argv += ["--resume", task.resume]
        return argv + list(self.options.extra_args)

    def policy_args(self, approvals: ApprovalService | None) -> list[str]:
        """Cursor cannot ask in -p mode, so the approval service's stance becomes flags: approve-all
        (or full autonomy) runs commands (--force); deny-all or read-only plans only (--mode plan);
        anything else keeps Cursor's default, which runs no command it was not allowed to."""
        from ..approvals.pipeline import ApprovalPipeline
        from ..approvals.policy import RulePolicy
        from ..approvals.simple import AutoApprove, AutoDeny

        service = approvals.service if isinstance(approvals, ApprovalPipeline) else approvals
        if isinstance(service, AutoApprove) or (
            isinstance(service, RulePolicy) and service.autonomy == "full" and not service.deny.commands
        ):
            return ["--force"]
        readonly = isinstance(service, RulePolicy) and service.autonomy == "readonly"
        if (isinstance(service, AutoDeny) or readonly) and self.options.permission_mode is None:
            return ["--mode", "plan"]
        return []

    def create_normalizer(self) -> CursorNormalizer:
        from ..normalizers.cursor_jsonl import CursorNormalizer

        return CursorNormalizer()

    def credentials(self) -> tuple[bool | None, str | None]:
        env = self.credential_env()
        auth = self.home(env) / ".config" / "cursor" / "auth.json"
        return self.credentials_in(env, ("CURSOR_API_KEY",), (auth,)) or (False, None)


def _is_cursor(program: str) -> bool:
    import subprocess

    try:
        done = subprocess.run([program, "--help"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "cursor" in (done.stdout + done.stderr).lower()
