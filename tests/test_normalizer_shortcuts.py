"""The normalizers' shortcuts give exactly what the general path gives (issue 16 point 5).

Each shortcut skips work the general path does (difflib's matching, pydantic's validation); these
tests hold it to the general path's result on generated inputs, so a shortcut that drifts fails.
"""

from __future__ import annotations

import difflib

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrate.entries import EntryMetadata, FileChange, FileEdit, NormalizedEntry, ToolUse, ToolUseEntry
from orchestrate.normalizers import diffs
from orchestrate.normalizers.base import EntryLog
from orchestrate.normalizers.evolve import build, evolve, make
from orchestrate.normalizers.kinds import SYSTEM
from orchestrate.normalizers.shape import shape_tool

# Line breaks of every kind str.splitlines knows, so a line's end is never only "\n".
_PIECES = ["a", "b", " ", "\n", "\r", "\r\n", "\u2028", "\x0c", "é"]
_TEXT = st.lists(st.sampled_from(_PIECES), max_size=30).map("".join)


def _difflib(path: str, old: str, new: str, created: bool) -> str:
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile="/dev/null" if created else f"a/{path.lstrip('/')}",
        tofile=f"b/{path.lstrip('/')}",
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


@settings(max_examples=300, deadline=None)
@given(text=_TEXT, other=_TEXT, created=st.booleans())
def test_diff_texts_is_difflibs_diff(text: str, other: str, created: bool) -> None:
    # A new file, an emptied one (the one-sided shortcut), an edit (the cached path) and no change.
    for old, new in ((text, ""), ("", text), (text, other), (text, text)):
        expected = _difflib("/w/f.py", old, new, created)
        assert diffs.diff_texts("/w/f.py", old, new, created=created) == expected
        assert diffs.diff_texts("/w/f.py", old, new, created=created) == expected  # (cached: the same)


def test_diff_of_a_large_edit_is_not_cached() -> None:
    big = "x\n" * diffs._CACHED_CHARS
    before = diffs._cached_diff.cache_info().currsize
    assert diffs.diff_texts("f", big, big + "y\n").endswith("+y\n")
    assert diffs._cached_diff.cache_info().currsize == before


@settings(max_examples=100, deadline=None)
@given(
    session=st.none() | st.text(max_size=5),
    model=st.none() | st.text(max_size=5),
    extra=st.dictionaries(
        st.sampled_from(["duration_ms", "raw", "extra", "stop_reason", "a__b", "x-y", "_p", "cwd"]),
        st.none() | st.integers() | st.text(max_size=3) | st.lists(st.integers(), max_size=2),
        max_size=4,
    ),
)
def test_metadata_built_equals_validated(
    session: str | None, model: str | None, extra: dict[str, object]
) -> None:
    log = EntryLog()
    log.session_id, log.model = session, model
    built = log.metadata(**extra)
    given_extra = {k: v for k, v in extra.items() if v is not None}
    validated = EntryMetadata(session_id=session, model=model, extra=given_extra or None)
    assert built == validated
    assert built.model_dump(by_alias=True) == validated.model_dump(by_alias=True)
    assert built.model_dump_json(by_alias=True) == validated.model_dump_json(by_alias=True)
    assert built.model_fields_set == validated.model_fields_set


def test_models_built_by_the_shortcuts_behave_as_validated_ones() -> None:
    meta = build(EntryMetadata, session_id="s", model=None, extra=None)
    entry = make(NormalizedEntry, index=3, type=SYSTEM, content="hi", metadata=meta)
    validated = NormalizedEntry(index=3, type=SYSTEM, content="hi", metadata=EntryMetadata(session_id="s"))
    assert entry == validated
    assert entry.model_dump_json() == validated.model_dump_json()
    changed = evolve(entry, content="bye")
    assert changed.content == "bye" and entry.content == "hi"
    assert changed == evolve(validated, content="bye") == validated.model_copy(update={"content": "bye"})
    assert changed.__pydantic_extra__ is None and changed.__pydantic_private__ is None


def test_a_tool_already_in_its_shape_is_not_copied_again() -> None:
    """A call is shaped whenever it is added or changed: an action already shaped comes back as
    the very same object (it was copied on every update), and one with an absolute diff header
    inside the working directory is still made relative."""
    diff = "--- a/work/x.py\n+++ b/work/x.py\n@@ -1 +1 @@\n-a\n+b\n"
    change = FileChange(type="edit", unified_diff=diff)
    tool = ToolUse(tool=ToolUseEntry(tool_name="Edit", action=FileEdit(path="/work/x.py", changes=(change,))))
    shaped = shape_tool(tool, "/work")
    action = shaped.tool.action
    assert isinstance(action, FileEdit) and action.path == "x.py"
    assert action.changes[0].unified_diff == "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"
    assert shape_tool(shaped, "/work") is shaped
