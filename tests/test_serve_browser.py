"""The board page in a real headless browser (Debian's Chromium driven by Playwright): submit a task,
approve its tool call with the button, send a follow-up, reload mid-run and see everything again; a
task in a worktree: its diff rendered, rolled back with the button.  Screenshots go to
test-artifacts/serve/ (gitignored)."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .helpers import FAKE_CLAUDE, REQUIRE_REAL_CLIS, ROOT
from .test_serve_api import Server, start_server
from .test_workspace_engine import agent
from .test_workspace_layer import make_repo

ARTIFACTS = ROOT / "test-artifacts" / "serve"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

try:
    from playwright.sync_api import Page, expect, sync_playwright
except ImportError:  # pragma: no cover - installed by the test extra
    sync_playwright = None  # type: ignore[assignment]

if not REQUIRE_REAL_CLIS and (CHROMIUM is None or sync_playwright is None):
    pytest.skip("needs Chromium (apt-get install chromium) and playwright", allow_module_level=True)

WAIT = 20_000  # ms: every wait in the browser is bounded


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(tmp_path_factory.mktemp("serve-browser") / "home")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    assert CHROMIUM is not None and sync_playwright is not None, "Chromium and playwright are required"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


@pytest.fixture
def page(browser: Any, server: Server, request: pytest.FixtureRequest) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    problems: list[str] = []
    pg.on("pageerror", lambda exc: problems.append(str(exc)))
    # Console errors, except a status the page expects (the sign-in's 401, a refused request).
    pg.on(
        "console",
        lambda msg: (
            problems.append(msg.text)
            if msg.type == "error" and not msg.text.startswith("Failed to load resource")
            else None
        ),
    )
    pg.problems = problems  # type: ignore[attr-defined]
    yield pg
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / f"{request.node.name}-last.png"), full_page=True)
    context.close()


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def sign_in(page: Page, server: Server) -> None:
    page.goto(f"{server.base}/#token={server.token}")
    expect(page.locator("#conn")).to_have_attribute("data-state", "live", timeout=WAIT)
    assert server.token not in page.url  # the token left the address bar


def test_without_the_token_the_page_shows_only_the_sign_in(page: Page, server: Server) -> None:
    page.goto(server.base + "/")
    expect(page.locator("#login")).to_be_visible(timeout=WAIT)
    assert page.locator("#board").count() == 0
    page.fill("#token", "wrong-token-wrong-token")
    page.click("#login button")
    expect(page.locator("#error")).to_have_text("That token was refused.", timeout=WAIT)
    page.fill("#token", server.token)
    page.click("#login button")
    expect(page.locator("#board")).to_be_visible(timeout=WAIT)


def test_submit_approve_follow_up_and_reload_mid_run(page: Page, server: Server, tmp_path: Path) -> None:
    sign_in(page, server)
    page.click("#new-task-toggle")
    expect(page.locator("#f-executor option[value='claude-code']")).to_have_count(1, timeout=WAIT)
    page.select_option("#f-executor", "claude-code")
    page.fill("#f-prompt", "tool")
    page.fill("#f-cwd", str(tmp_path))
    page.click("#new-task summary")
    page.fill("#f-options", json.dumps({"base_command": [sys.executable, str(FAKE_CLAUDE)]}))
    page.click("#f-submit")

    # The task appears on the board, asks, and its tool call shows as waiting, with the buttons.
    approval = page.locator("#t-approvals .approval")
    expect(approval).to_contain_text("echo original", timeout=WAIT)
    tool = page.locator(".entry.tool_use").first
    expect(tool.locator(".tool-status")).to_have_attribute("data-status", "pending_approval", timeout=WAIT)
    expect(page.locator('#board [data-column="approval"] .card')).to_have_count(1, timeout=WAIT)
    shot(page, "1-waiting-for-approval")

    approval.locator("button.approve").click()
    expect(tool.locator(".tool-status")).to_have_attribute("data-status", "success", timeout=WAIT)
    expect(tool.locator("pre.output")).to_contain_text("ran: echo original", timeout=WAIT)
    expect(page.locator("#t-status")).to_have_text("done", timeout=WAIT)
    expect(page.locator('#board [data-column="done"] .card')).to_have_count(1, timeout=WAIT)
    expect(page.locator("#ws-none")).to_contain_text("runs in its own directory", timeout=WAIT)
    shot(page, "2-approved-and-done")

    # A follow-up: a second run in the same task, streaming its answer.
    page.fill("#fu-text", "slow")
    page.click("#fu-send")
    second = page.locator(".run").nth(1)
    expect(second.locator(".entry.assistant_message")).to_contain_text("w3 ", timeout=WAIT)
    expect(page.locator("#t-status")).to_have_text("running", timeout=WAIT)
    first_run_text = page.locator(".run").first.inner_text()

    # Reload mid-run: everything comes back from the stream, and it goes on live.
    page.reload()
    expect(page.locator("#conn")).to_have_attribute("data-state", "live", timeout=WAIT)
    expect(page.locator(".run")).to_have_count(2, timeout=WAIT)
    expect(page.locator(".run").first.locator(".tool-status")).to_have_attribute(
        "data-status", "success", timeout=WAIT
    )
    assert page.locator(".run").first.inner_text() == first_run_text
    words = page.locator(".run").nth(1).locator(".entry.assistant_message")
    before = len(words.inner_text())
    page.wait_for_function(
        "n => document.querySelectorAll('.run')[1].querySelector('.entry.assistant_message')"
        ".textContent.length > n",
        arg=before,
        timeout=WAIT,
    )
    shot(page, "3-reloaded-mid-run")

    # Cancel from the page stops the run.
    page.click("#t-cancel")
    expect(page.locator("#t-status")).to_have_text("cancelled", timeout=WAIT)
    expect(page.locator('#board [data-column="failed"] .card')).to_have_count(1, timeout=WAIT)
    shot(page, "4-cancelled")
    assert not page.problems, page.problems  # type: ignore[attr-defined]


def test_a_second_client_answering_first_is_shown(page: Page, server: Server, tmp_path: Path) -> None:
    sign_in(page, server)
    with server.client() as http:
        body = {
            "prompt": "tool",
            "executor": "claude-code",
            "cwd": str(tmp_path),
            "executor_options": {"base_command": [sys.executable, str(FAKE_CLAUDE)]},
        }
        task_id = http.post("/api/tasks", json=body).json()["task"]["id"]
        page.locator(f'#board .card[data-task="{task_id}"]').click(timeout=WAIT)
        approval = page.locator("#t-approvals .approval")
        expect(approval).to_be_visible(timeout=WAIT)
        [open_one] = http.get("/api/approvals", params={"task_id": task_id}).json()
        assert http.post(f"/api/approvals/{open_one['id']}", json={"decision": "deny"}).status_code == 200
    # The page says who answered first, and its buttons can answer no more.
    expect(approval.locator(".said")).to_contain_text("Already answered: denied by http", timeout=WAIT)
    expect(approval.locator("button.approve")).to_be_disabled()
    expect(page.locator(".entry.tool_use .tool-status").first).to_have_attribute(
        "data-status", "denied", timeout=WAIT
    )
    shot(page, "5-already-answered")


def test_a_task_in_a_worktree_shows_its_diff_and_rolls_back(
    page: Page, server: Server, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    plain = tmp_path / "plain"
    plain.mkdir()
    sign_in(page, server)
    page.click("#new-task-toggle")
    expect(page.locator("#f-executor option[value='claude-code']")).to_have_count(1, timeout=WAIT)
    page.select_option("#f-executor", "claude-code")
    page.fill("#f-prompt", "plain")
    expect(page.locator("#f-ws")).to_be_hidden()
    page.select_option("#f-workspace", "worktree")
    expect(page.locator("#f-base")).to_be_visible()
    page.click("#new-task summary")
    page.fill("#f-options", json.dumps(agent(tmp_path)))
    # Outside git: the server's refusal, with its code, on the form (and no task made).
    page.fill("#f-cwd", str(plain))
    page.click("#f-submit")
    expect(page.locator("#submit-error")).to_contain_text("not_a_git_repository", timeout=WAIT)
    expect(page.locator("#task")).to_be_hidden()

    page.fill("#f-cwd", str(repo))
    page.fill("#f-base", "main")
    page.fill("#f-setup", "mkdir -p build && echo made > build/setup-done")
    page.click("#f-submit")
    expect(page.locator("#t-status")).to_have_text("done", timeout=WAIT)

    # The diff as a diff: the files with their counts, the hunks colored line by line.
    listed = page.locator("#t-diff .file-list li")
    expect(listed).to_have_count(2, timeout=WAIT)
    expect(listed.nth(0)).to_contain_text("notes.md")
    expect(page.locator('#t-diff .file-list li[data-path="notes.md"] .n-add')).to_have_text("+1")
    expect(page.locator('#t-diff .file-list li[data-path="src/app.py"] .n-del')).to_have_text("\u22121")
    app = page.locator('#t-diff .file-diff[data-path="src/app.py"] pre.diff')
    expect(app.locator("span.add")).to_have_text(["+print('turn one')"])
    expect(app.locator("span.del")).to_have_text(["-print('hello')"])
    expect(app.locator("span.hunk")).to_have_count(1)
    expect(page.locator("#ws-where")).to_contain_text("orchestrate/task-")
    points = page.locator("#t-checkpoints li")
    expect(points).to_have_count(3)  # before the agent, after its turn, and base
    expect(points.nth(0)).to_contain_text("turn 1 start")
    expect(points.nth(1)).to_contain_text("turn 1 end")
    shot(page, "6-worktree-diff")

    task_id = int(page.locator("#t-title").inner_text().split("#")[1].split()[0])
    with server.client() as http:
        ws = Path(http.get(f"/api/tasks/{task_id}").json()["task"]["workspace"]["path"])
    assert (ws / "notes.md").read_text() == "turn one\n" and (ws / "build" / "setup-done").exists()
    # Rollback asks first: dismissed, nothing happens; accepted, the files are as checkpoint 1 had them.
    button = page.locator('#t-checkpoints li[data-checkpoint="1"] button.rollback')
    page.once("dialog", lambda d: d.dismiss())
    button.click()
    expect(page.locator("#t-diff .file-list li")).to_have_count(2)
    assert (ws / "notes.md").exists()
    page.once("dialog", lambda d: d.accept())
    button.click()
    expect(page.locator("#ws-said")).to_contain_text("Rolled back to 1", timeout=WAIT)
    expect(page.locator("#t-diff")).to_contain_text("No changes.", timeout=WAIT)
    expect(points).to_have_count(4, timeout=WAIT)  # the files as they were, kept as checkpoint 3
    assert not (ws / "notes.md").exists()
    assert (ws / "src" / "app.py").read_text() == "print('hello')\n"
    shot(page, "7-rolled-back")
    assert not page.problems, page.problems  # type: ignore[attr-defined]
