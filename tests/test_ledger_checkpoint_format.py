"""The C2SP tlog-checkpoint note text (ledger/_checkpoint.py).

Vectors marked "C2SP:" come from C2SP/C2SP tlog-checkpoint.md; those marked "Go:" from
transparency-dev/formats log/checkpoint_test.go, whose parser is looser than the spec (leading
zeros, any hash length, empty trailing lines): where the two differ we follow the spec.
"""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentledger.ledger._checkpoint import ROOT_SIZE, Checkpoint, CheckpointFormatError
from agentledger.ledger.signed_note import UnverifiedNoteError, open_note

# C2SP: the example checkpoint of tlog-checkpoint.md.
C2SP_BODY = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
C2SP_NOTE = (
    C2SP_BODY + "\n\u2014 example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeO"
    "oRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n"
)
ROOT = bytes(range(32))
ROOT_B64 = base64.b64encode(ROOT).decode()


def test_the_c2sp_example_parses_and_writes_back_byte_for_byte() -> None:
    """C2SP: origin, size and a 32-byte root; body() gives the same text."""
    checkpoint = Checkpoint.parse(C2SP_BODY)
    assert checkpoint.origin == "example.com/behind-the-sofa"
    assert checkpoint.size == 20852163
    assert checkpoint.root == base64.b64decode("CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=")
    assert checkpoint.extensions == ()
    assert checkpoint.body() == C2SP_BODY


def test_the_c2sp_signed_example_is_a_note_whose_text_is_the_body() -> None:
    """C2SP: the signed example opens (its key is unknown to us) to exactly the body."""
    with pytest.raises(UnverifiedNoteError) as caught:
        open_note(C2SP_NOTE, [])
    note = caught.value.note
    assert note.text == C2SP_BODY
    assert [s.name for s in note.unverified] == ["example.com/behind-the-sofa"]
    assert Checkpoint.parse(note.text).size == 20852163


def test_the_body_has_go_marshal_layout() -> None:
    r"""Go TestMarshal's layout ``origin\nsize\nbase64(hash)\n``, with a 32-byte root."""
    assert Checkpoint("Log", 123, ROOT).body() == f"Log\n123\n{ROOT_B64}\n"


def test_extension_lines_follow_the_root_in_order() -> None:
    """Go TestExtendCheckpoint's shape: extension lines after the root, each newline-ended."""
    checkpoint = Checkpoint("Moon Log", 4027504, ROOT, ("6086d1a9", "Waxing gibbous"))
    text = f"Moon Log\n4027504\n{ROOT_B64}\n6086d1a9\nWaxing gibbous\n"
    assert checkpoint.body() == text
    assert Checkpoint.parse(text) == checkpoint


def test_the_empty_tree_has_size_zero() -> None:
    """C2SP: the size is ``0`` for an empty tree, the only number allowed a leading zero."""
    assert Checkpoint.parse(f"log\n0\n{ROOT_B64}\n").size == 0


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("Log\n123\nYmFuYW5hcw==\n", 3),  # Go "valid one": a 7-byte hash
        ("Banana\n9944\ndGhlIHZpZXcgZnJvbSB0aGUgdHJlZSB0b3BzIGlzIGdyZWF0IQ==\n", 3),  # 37 bytes
        (f"Log\n9944\n{ROOT_B64}\n\n\n\n", 4),  # Go "valid with trailing newlines"
        ("Moon Log\n4027504\naXQncyBhIHJvb3QgaGFzaA==\n6086d1a9\nWaxing gibbous\n", 3),
    ],
)
def test_what_go_accepts_but_the_spec_forbids_is_refused(text: str, line: int) -> None:
    """Go's Unmarshal takes any hash length and empty trailing lines; the spec does not."""
    with pytest.raises(CheckpointFormatError) as caught:
        Checkpoint.parse(text)
    assert caught.value.line == line


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("Head\n9944\n", None),  # Go "invalid - insufficient lines"
        (f"\n9944\n{ROOT_B64}\n", 1),  # Go "invalid - empty header"
        (f"Log\n123\n{ROOT_B64}", None),  # Go "invalid - missing newline on roothash"
        (f"Log\nbananas\n{ROOT_B64}\n", 2),  # Go "invalid size - not a number"
        (f"Log\n-34\n{ROOT_B64}\n", 2),  # Go "invalid size - negative"
        (f"Log\n3438945738945739845734895735\n{ROOT_B64}\n", 2),  # Go "too large"
        ("Log\n123\nThisIsn'tBase64\n", 3),  # Go "invalid roothash - not base64"
    ],
)
def test_the_go_invalid_checkpoints_are_refused(text: str, line: int | None) -> None:
    """Go TestUnmarshalLogState: every "invalid" case is refused here too, naming the line."""
    with pytest.raises(CheckpointFormatError) as caught:
        Checkpoint.parse(text)
    assert caught.value.line == line


@pytest.mark.parametrize(
    "size",
    ["007", "00", "+5", " 5", "5 ", "5_000", "1e3", "\u0663", "0x10", "18446744073709551616"],
)
def test_a_size_that_is_not_plain_ascii_decimal_is_refused(size: str) -> None:
    """No leading zeros, signs, spaces, underscores, other digits, or values past uint64."""
    with pytest.raises(CheckpointFormatError, match="line 2, tree size"):
        Checkpoint.parse(f"log\n{size}\n{ROOT_B64}\n")


def test_the_largest_uint64_size_is_accepted_and_a_huge_one_refused_cleanly() -> None:
    """2**64 - 1 parses; a size of thousands of digits is refused, not a crash in int()."""
    assert Checkpoint.parse(f"log\n{2**64 - 1}\n{ROOT_B64}\n").size == 2**64 - 1
    with pytest.raises(CheckpointFormatError, match="larger than"):
        Checkpoint.parse(f"log\n{'9' * 5000}\n{ROOT_B64}\n")


@pytest.mark.parametrize(
    "root",
    [
        base64.b64encode(bytes(31)).decode(),
        base64.b64encode(bytes(33)).decode(),
        ROOT_B64.rstrip("="),
        ROOT_B64[:-2] + "B=",  # nonzero padding bits: decodes to the same bytes in Go
        base64.urlsafe_b64encode(b"\xfb" * 32).decode(),
        "",
    ],
)
def test_a_root_that_is_not_canonical_base64_of_32_bytes_is_refused(root: str) -> None:
    """The root hash is standard, padded, canonical base64 of exactly 32 bytes."""
    with pytest.raises(CheckpointFormatError) as caught:
        Checkpoint.parse(f"log\n1\n{root}\n")
    assert caught.value.line == 3


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (f"log\n1\n{ROOT_B64}\next\n\nmore\n", 5),
        (f"log\n1\n{ROOT_B64}\n\n", 4),
        (f"lo\tg\n1\n{ROOT_B64}\n", 1),
        (f"log\n1\n{ROOT_B64}\nex\rt\n", 4),
    ],
)
def test_empty_lines_and_control_characters_are_refused(text: str, line: int) -> None:
    """Extension lines must be non-empty; a note text may not hold control characters."""
    with pytest.raises(CheckpointFormatError) as caught:
        Checkpoint.parse(text)
    assert caught.value.line == line


@pytest.mark.parametrize(
    ("origin", "size", "root", "extensions"),
    [
        ("", 1, ROOT, ()),
        ("a\nb", 1, ROOT, ()),
        ("log", -1, ROOT, ()),
        ("log", 2**64, ROOT, ()),
        ("log", True, ROOT, ()),
        ("log", 1, ROOT[:31], ()),
        ("log", 1, ROOT, ("",)),
        ("log", 1, ROOT, ("two\nlines",)),
    ],
)
def test_values_no_body_can_carry_are_refused_at_construction(
    origin: str, size: int, root: bytes, extensions: tuple[str, ...]
) -> None:
    """A Checkpoint that exists can always be written and parsed back."""
    with pytest.raises(CheckpointFormatError):
        Checkpoint(origin, size, root, extensions)


_LINE = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40)


@given(
    origin=_LINE,
    size=st.integers(0, 2**64 - 1),
    root=st.binary(min_size=ROOT_SIZE, max_size=ROOT_SIZE),
    extensions=st.lists(_LINE, max_size=4).map(tuple),
)
def test_every_checkpoint_round_trips_through_its_body(
    origin: str, size: int, root: bytes, extensions: tuple[str, ...]
) -> None:
    """parse(body(c)) == c, and the body is what parse reads, byte for byte."""
    checkpoint = Checkpoint(origin, size, root, extensions)
    body = checkpoint.body()
    assert Checkpoint.parse(body) == checkpoint
    assert Checkpoint.parse(body).body() == body
