"""A task's workspace over real HTTP: a server started by the test, real git repositories made by the
test, and a fake agent that writes, edits and deletes files at each turn.  Create a task in a
worktree, its checkpoints with their turns, its diff (whole, one turn, between checkpoints), rollback
(refused while it runs; restores the exact files), commit on its branch, removal; and the refusals,
each with its stable code."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .test_serve_api import Server, create, start_server, wait_status
from .test_workspace_engine import agent
from .test_workspace_layer import git, make_repo, tree_state, user_has_work_in_progress, user_view


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(tmp_path_factory.mktemp("serve-ws") / "home")
    yield s
    s.stop()


@pytest.fixture
def http(server: Server) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


def error(r: httpx.Response) -> tuple[int, str]:
    return r.status_code, r.json()["error"]["code"]


def files_of(diff: dict[str, Any]) -> dict[str, tuple[str, int, int]]:
    return {f["path"]: (f["status"], f["additions"], f["deletions"]) for f in diff["files"]}


def wait_turns(http: httpx.Client, task_id: int, turns: int, seconds: float = 20) -> None:
    """Until the task has ``turns`` runs and has ended (a follow-up starts a run at once)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        runs = http.get(f"/api/tasks/{task_id}/runs").json()
        if len(runs) >= turns and runs[turns - 1]["status"] != "running":
            wait_status(http, task_id, "done", "failed", seconds=max(0.1, deadline - time.monotonic()))
            return
        time.sleep(0.05)
    raise AssertionError(f"task {task_id} never finished turn {turns}")


def test_a_task_in_a_worktree_diffed_rolled_back_committed_and_removed(
    http: httpx.Client, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    user_has_work_in_progress(repo)
    user = user_view(repo)
    options = {"base": "main", "setup": "mkdir -p build && echo made > build/setup-done", "keep": True}
    task_id = create(
        http, "tool", repo, executor_options=agent(tmp_path), workspace="worktree", workspace_options=options
    )

    # Turn 1 has written its files and waits for an approval: the task runs.
    task = wait_status(http, task_id, "waiting_approval")
    ws = Path(task["workspace"]["path"])
    assert not ws.is_relative_to(repo) and (ws / "notes.md").read_text() == "turn one\n"
    assert (ws / "build" / "setup-done").read_text() == "made\n" and (ws / ".env").exists()
    assert task["workspace"]["setup"]["exit_code"] == 0 and task["workspace"]["keep"] is True
    points = http.get(f"/api/tasks/{task_id}/checkpoints").json()
    assert points["branch"] == f"orchestrate/task-{task_id}" and points["path"] == str(ws)
    assert [(c["id"], c["turn"], c["moment"]) for c in points["checkpoints"]] == [(1, 1, "start")]
    so_far = http.get(f"/api/tasks/{task_id}/diff", params={"turn": 1}).json()
    assert (so_far["start"], so_far["end"]) == ("1", "now")
    assert files_of(so_far) == {"notes.md": ("added", 1, 0), "src/app.py": ("modified", 1, 1)}
    # Nothing that changes the files while a run works there.
    assert error(http.post(f"/api/tasks/{task_id}/rollback/1")) == (409, "workspace_in_use")
    assert error(http.delete(f"/api/tasks/{task_id}/workspace")) == (409, "workspace_in_use")
    assert error(http.post(f"/api/tasks/{task_id}/commit", json={"message": "x"})) == (
        409,
        "workspace_in_use",
    )
    assert (ws / "notes.md").read_text() == "turn one\n" and ws.is_dir()

    [asked] = http.get("/api/approvals", params={"task_id": task_id}).json()
    assert http.post(f"/api/approvals/{asked['id']}", json={"decision": "approve"}).status_code == 200
    wait_turns(http, task_id, 1)
    after_one = tree_state(ws)
    whole = http.get(f"/api/tasks/{task_id}/diff").json()
    assert files_of(whole) == {"notes.md": ("added", 1, 0), "src/app.py": ("modified", 1, 1)}
    assert (whole["additions"], whole["deletions"], whole["truncated"], whole["omitted_files"]) == (
        2,
        1,
        False,
        0,
    )
    [app] = [f for f in whole["files"] if f["path"] == "src/app.py"]
    assert "-print('hello')\n+print('turn one')" in app["diff"] and app["diff"].startswith("diff --git a/")

    # Turn 2 (a follow-up) edits one file and deletes another; each diff shows its own part.
    assert http.post(f"/api/tasks/{task_id}/messages", json={"text": "plain"}).status_code == 200
    wait_turns(http, task_id, 2)
    points = http.get(f"/api/tasks/{task_id}/checkpoints").json()["checkpoints"]
    runs = http.get(f"/api/tasks/{task_id}/runs").json()
    assert [(c["id"], c["turn"], c["moment"], c["run_id"]) for c in points] == [
        (1, 1, "start", runs[0]["id"]),
        (2, 1, "end", runs[0]["id"]),
        (3, 2, "start", runs[1]["id"]),
        (4, 2, "end", runs[1]["id"]),
    ]
    two = http.get(f"/api/tasks/{task_id}/diff", params={"turn": 2}).json()
    assert (two["start"], two["end"], two["turn"]) == ("3", "4", 2)
    assert files_of(two) == {"notes.md": ("modified", 1, 1), "README.md": ("deleted", 0, 1)}
    one = http.get(f"/api/tasks/{task_id}/diff", params={"start": 1, "end": 2}).json()
    assert files_of(one) == files_of(whole)
    for params, expected in (
        ({"turn": 3}, (404, "turn_not_found")),
        ({"start": 99}, (404, "checkpoint_not_found")),
        ({"start": "HEAD"}, (422, "invalid_request")),
        ({"end": "--output=/tmp/x"}, (422, "invalid_request")),
        ({"turn": 1, "start": 2}, (422, "invalid_request")),
        ({"turn": 0}, (422, "invalid_request")),
    ):
        assert error(http.get(f"/api/tasks/{task_id}/diff", params=params)) == expected, params

    # Rollback to the end of turn 1: the exact files again (README back, notes as turn 1 left them).
    r = http.post(f"/api/tasks/{task_id}/rollback/2")
    assert r.status_code == 200, r.text
    assert r.json()["to"] == "2" and r.json()["saved"]["id"] == 5
    assert tree_state(ws) == after_one
    assert http.get(f"/api/tasks/{task_id}/diff", params={"start": 2}).json()["files"] == []
    for bad, expected in (("99", (404, "checkpoint_not_found")), ("0", (422, "invalid_request"))):
        assert error(http.post(f"/api/tasks/{task_id}/rollback/{bad}")) == expected, bad
    for bad in ("HEAD", "abcdef1", "1;rm", "-1", "%2e%2e"):
        assert http.post(f"/api/tasks/{task_id}/rollback/{bad}").status_code in (404, 422), bad
    assert tree_state(ws) == after_one

    # Commit on the task's branch, with an author; again: nothing to commit.
    author = {"name": "Ada Lovelace", "email": "ada@example.com"}
    r = http.post(f"/api/tasks/{task_id}/commit", json={"message": "The task's work", "author": author})
    assert r.status_code == 200, r.text
    made = r.json()["commit"]
    branch = r.json()["branch"]
    assert git(repo, "log", "-1", "--format=%H %an <%ae> %s", branch).strip() == (
        f"{made} Ada Lovelace <ada@example.com> The task's work"
    )
    assert git(repo, "show", f"{made}:notes.md") == "turn one\n"
    assert http.post(f"/api/tasks/{task_id}/commit", json={"message": "again"}).json()["commit"] is None
    for body in ({"message": "  "}, {"message": "x", "author": {"name": "A <b>", "email": "a@b"}}, {}):
        assert error(http.post(f"/api/tasks/{task_id}/commit", json=body)) == (422, "invalid_request"), body

    # Removal: the worktree and its checkpoints go; the branch stays (it holds the commit).
    r = http.delete(f"/api/tasks/{task_id}/workspace")
    assert r.status_code == 200, r.text
    assert r.json() == {"task_id": task_id, "path": str(ws), "branch": branch, "branch_kept": True}
    assert not ws.exists()
    assert git(repo, "for-each-ref", "refs/orchestrate/") == ""
    assert http.get(f"/api/tasks/{task_id}").json()["task"]["workspace"] is None
    for method, path in (
        ("GET", "checkpoints"),
        ("GET", "diff"),
        ("POST", "rollback/1"),
        ("DELETE", "workspace"),
    ):
        assert error(http.request(method, f"/api/tasks/{task_id}/{path}")) == (404, "no_workspace"), path
    assert user_view(repo) == user  # the user's index, HEAD, branch, stash and files never moved


def test_a_copy_of_a_plain_directory(http: httpx.Client, tmp_path: Path) -> None:
    source = tmp_path / "plain"
    (source / "src").mkdir(parents=True)
    (source / "README.md").write_text("# demo\n")
    (source / "src" / "app.py").write_text("print('hello')\n")
    before = tree_state(source)
    task_id = create(http, "plain", source, executor_options=agent(tmp_path), workspace="copy")
    task = wait_status(http, task_id, "done", "failed")
    assert task["status"] == "done", task
    diff = http.get(f"/api/tasks/{task_id}/diff").json()
    assert files_of(diff) == {"notes.md": ("added", 1, 0), "src/app.py": ("modified", 1, 1)}
    assert tree_state(source) == before  # the agent worked in the copy
    assert http.post(f"/api/tasks/{task_id}/rollback/base").status_code == 200
    assert http.get(f"/api/tasks/{task_id}/diff").json()["files"] == []
    r = http.delete(f"/api/tasks/{task_id}/workspace")
    assert r.status_code == 200 and r.json()["branch_kept"] is False
    assert not Path(task["workspace"]["path"]).exists()


def test_bad_workspaces_are_refused_with_a_stable_code(http: httpx.Client, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    plain = tmp_path / "plain"
    plain.mkdir()
    base = {"prompt": "plain", "executor": "claude-code", "cwd": str(repo)}
    worktree = base | {"workspace": "worktree"}
    before = http.get("/api/tasks").json()["tasks"]
    for body, expected in (
        (worktree | {"cwd": str(plain)}, (422, "not_a_git_repository")),
        (worktree | {"workspace_options": {"base": "no-such-branch"}}, (422, "invalid_request")),
        (worktree | {"workspace_options": {"base": "--upload-pack=touch /tmp/x"}}, (422, "invalid_request")),
        (worktree | {"workspace_options": {"base": "main..HEAD"}}, (422, "invalid_request")),
        (worktree | {"workspace_options": {"root": "/"}}, (422, "invalid_request")),  # the server's to say
        (worktree | {"workspace_options": {"copy_globs": ["../../etc/*"]}}, (422, "invalid_request")),
        (worktree | {"workspace_options": {"setup_timeout": 0}}, (422, "invalid_request")),
        (base | {"workspace": "elsewhere"}, (422, "invalid_request")),
        (base | {"workspace_options": {"keep": True}}, (422, "invalid_request")),  # with here
        (base | {"workspace": "copy", "workspace_options": {"base": "main"}}, (422, "invalid_request")),
        (base | {"run_options": {"workspace": "worktree"}}, (422, "invalid_request")),
        (base | {"run_options": {"workspace_options": {"root": "/"}}}, (422, "invalid_request")),
    ):
        r = http.post("/api/tasks", json=body)
        assert error(r) == expected, (body, r.text)
        assert "Traceback" not in r.text
    # An empty repository has no commit to start from.
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    r = http.post("/api/tasks", json=worktree | {"cwd": str(empty)})
    assert error(r) == (422, "invalid_request") and "no commit" in r.json()["error"]["message"]
    assert http.get("/api/tasks").json()["tasks"] == before  # nothing refused was queued

    # A task that runs in its own directory has no workspace; no task at all is not_found.
    task_id = create(http, "plain", plain)
    wait_status(http, task_id, "done")
    for method, path, body in (
        ("GET", "checkpoints", None),
        ("GET", "diff", None),
        ("POST", "rollback/1", None),
        ("POST", "commit", {"message": "x"}),
        ("DELETE", "workspace", None),
    ):
        r = http.request(method, f"/api/tasks/{task_id}/{path}", json=body)
        assert error(r) == (404, "no_workspace"), path
        assert error(http.request(method, f"/api/tasks/987654/{path}", json=body)) == (404, "not_found")


@pytest.mark.anyio
async def test_without_git_workspaces_are_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server whose PATH has no git says so with its code (503 workspace_unavailable), and queues
    nothing (in process, the app behind its door: only the PATH differs)."""
    from orchestrate.serve import ServeConfig, create_app

    repo = make_repo(tmp_path / "repo")
    monkeypatch.setenv("ORCHESTRATE_HOME", str(tmp_path / "home"))
    token = "t" * 32
    store = f"sqlite:///{tmp_path / 'store.db'}"
    app = create_app(ServeConfig(token=token, store=store, worker=False, allowed_hosts=["testserver"]))
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://testserver",
            headers={"authorization": f"Bearer {token}"},
        ) as client,
    ):
        body = {"prompt": "plain", "executor": "claude-code", "cwd": str(repo), "workspace": "worktree"}
        r = await client.post("/api/tasks", json=body)
        assert error(r) == (503, "workspace_unavailable") and "git is not installed" in r.text
        assert (await client.get("/api/tasks")).json()["tasks"] == []
        assert (await client.post("/api/tasks", json=body | {"workspace": "here"})).status_code == 201


def test_a_diff_response_is_bounded_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrate.serve import workspaces as ops
    from orchestrate.workspace import FileChange

    def change(path: str, size: int, truncated: bool = False) -> FileChange:
        return FileChange(
            path=path,
            status="added",
            old_mode=None,
            new_mode="100644",
            binary=False,
            additions=1,
            deletions=0,
            diff="+" + "x" * (size - 1),
            truncated=truncated,
        )

    monkeypatch.setattr(ops, "MAX_DIFF_CHARS", 100)
    monkeypatch.setattr(ops, "MAX_DIFF_FILES", 3)
    kept, cut, omitted = ops.bound_diff([change("a", 60), change("b", 60), change("c", 30), change("d", 1)])
    assert [(c.path, len(c.diff), c.truncated) for c in kept] == [
        ("a", 60, False),
        ("b", 0, True),
        ("c", 30, False),
    ]
    assert (cut, omitted) == (True, 1)
    kept, cut, omitted = ops.bound_diff([change("a", 10), change("b", 10, truncated=True)])
    assert [len(c.diff) for c in kept] == [10, 10] and (cut, omitted) == (True, 0)
    assert ops.bound_diff([change("a", 10)])[1:] == (False, 0)
