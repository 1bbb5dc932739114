from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from orchestrate.normalizers.framing import LineFramer, LineTooLong


def frame(chunks: list[bytes], max_line: int = 1 << 20) -> list[object]:
    framer = LineFramer(max_line)
    out: list[object] = []
    for chunk in chunks:
        out += framer.feed(chunk)
    return out + framer.finish()


def test_lines_split_anywhere_and_final_line_without_newline() -> None:
    assert frame([b'{"a"', b':1}\n{"b":', b"2}\r\n", b"last"]) == ['{"a":1}', '{"b":2}', "last"]


def test_multibyte_character_cut_across_chunks_is_decoded_whole() -> None:
    data = "héllo ✓ 🙂\n".encode()
    for cut in range(1, len(data)):
        assert frame([data[:cut], data[cut:]]) == ["héllo ✓ 🙂"]


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    assert frame([b"ok \xff\xfe end\n", b"next\n"]) == ["ok \ufffd\ufffd end", "next"]


def test_blank_lines_are_skipped() -> None:
    assert frame([b"\n\r\n  \nx\n"]) == ["x"]


def test_over_long_line_becomes_an_error_and_the_stream_goes_on() -> None:
    out = frame([b"short\n", b"x" * 40, b"y" * 40, b"z\nafter\n"], max_line=50)
    assert out[0] == "short"
    assert isinstance(out[1], LineTooLong) and out[1].length == 81 and out[1].head.startswith("xxx")
    assert out[2] == "after"


def test_over_long_line_memory_stays_bounded() -> None:
    framer = LineFramer(1000)
    for _ in range(100):
        assert framer.feed(b"a" * 999) == []
        assert len(framer._buf) <= 1000  # dropped as it streams, not held until the newline
    assert framer.feed(b"\n") == [LineTooLong(99_900, "a" * 256)]


def test_over_long_final_line_without_newline() -> None:
    out = frame([b"a" * 100], max_line=10)
    assert len(out) == 1 and isinstance(out[0], LineTooLong) and out[0].length == 100


def test_default_limit_is_at_least_64_mib() -> None:
    assert LineFramer()._max >= 64 * 1024 * 1024


@given(st.lists(st.binary(max_size=30), max_size=12), st.data())
def test_any_chunking_gives_the_same_lines(parts: list[bytes], data: st.DataObject) -> None:
    blob = b"\n".join(parts) + b"\n" + "tail ✓".encode()
    cuts = sorted(data.draw(st.lists(st.integers(0, len(blob)), max_size=10)))
    chunks = [blob[a:b] for a, b in zip([0, *cuts], [*cuts, len(blob)], strict=True)]
    assert frame(chunks, max_line=40) == frame([blob], max_line=40)
