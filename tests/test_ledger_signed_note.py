"""Signed notes (ledger/signed_note.py), byte-compatible with Go's golang.org/x/mod/sumdb/note.

The vectors marked "Go:" are copied from golang/mod sumdb/note/note_test.go (and the package
documentation in sumdb/note/note.go); the ones marked "C2SP:" from C2SP/C2SP signed-note.md.
Go strings index bytes, so Go's slices of signature lines are reproduced on UTF-8 bytes.
"""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentledger.ledger.signed_note import (
    MAX_SIGNATURES,
    AmbiguousKeyError,
    InvalidSignatureError,
    MalformedKeyError,
    MalformedNoteError,
    Note,
    NoteError,
    Signature,
    UnverifiedNoteError,
    add_signature,
    generate_key,
    open_note,
    read_signer_key,
    read_verifier_key,
    sign_note,
    write_key_pair,
)

# Go: TestNewSigner, TestNewVerifier, TestSign, TestOpen (sumdb/note/note_test.go).
PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
PETER_SIG = (
    "\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngot"
    "pRZb6KE6RyyBwJnAM=\n"
)
ENOCH_SIG = (
    "\u2014 EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLo"
    "x33WWd1RvMc+QQ=\n"
)
PETER = Signature(
    "PeterNeumann",
    0xC74F20A3,
    "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=",
)
ENOCH = Signature(
    "EnochRoot",
    0xAF0CFE78,
    "rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=",
)
SIGNED = TEXT + "\n" + PETER_SIG
SEED_TEXT = "AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"


def _insert_abcd_at_byte_60(line: str) -> bytes:
    """Go's ``sig[:60] + "ABCD" + sig[60:]``, on bytes as Go slices strings."""
    raw = line.encode()
    return raw[:60] + b"ABCD" + raw[60:]


# Go vectors: keys ------------------------------------------------------------------------------


def test_the_go_verifier_key_is_accepted() -> None:
    """Go TestNewVerifier: the fixed verifier key parses, as text and as the key of a note."""
    assert read_verifier_key(PETER_VKEY) == PETER_VKEY
    assert open_note(SIGNED, [PETER_VKEY]).signatures == (PETER,)


def test_every_mangling_of_the_go_verifier_key_is_refused() -> None:
    """Go TestNewVerifier: every proper substring and every one-byte increment is refused."""
    raw = PETER_VKEY.encode()
    manglings = [raw[i:j] for i in range(len(raw) + 1) for j in range(i + 1, len(raw) + 1)]
    manglings = [m for m in manglings if m != raw]
    for i in range(len(raw)):
        manglings.append(raw[:i] + bytes([raw[i] + 1]) + raw[i + 1 :])
    for mangled in manglings:
        with pytest.raises(MalformedKeyError):
            open_note(SIGNED, [mangled.decode()])


def test_go_verifier_keys_with_adjusted_hashes_are_still_refused() -> None:
    """Go TestNewVerifier: a wrong-length key and an unknown algorithm, each with a fixed hash.

    Go gets past its hash check on the first because it ignores base64 padding bits; we refuse
    the non-canonical ``BADKEY==`` before hashing.
    """
    wrong_length = "PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY=="
    with pytest.raises(MalformedKeyError, match="canonical"):
        read_verifier_key(wrong_length)
    unknown_alg = "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
    with pytest.raises(MalformedKeyError, match="unknown key algorithm 101") as caught:
        read_verifier_key(unknown_alg)
    assert caught.value.name == "PeterNeumann"


def test_every_mangling_of_the_go_signer_key_is_refused_without_quoting_it() -> None:
    """Go TestNewSigner: every substring and increment is refused; no message shows the seed."""
    raw = PETER_SKEY.encode()
    manglings = [raw[i:j] for i in range(len(raw) + 1) for j in range(i + 1, len(raw) + 1)]
    manglings = [m for m in manglings if m != raw]
    for i in range(len(raw)):
        manglings.append(raw[:i] + bytes([raw[i] + 1]) + raw[i + 1 :])
    for mangled in manglings:
        with pytest.raises(MalformedKeyError) as caught:
            sign_note(TEXT, mangled.decode())
        assert SEED_TEXT[:12] not in str(caught.value)
        assert SEED_TEXT[:12] not in repr(caught.value)


def test_a_signer_key_with_a_wrong_hash_is_refused() -> None:
    """The hash is checked against the public key derived from the seed, as Go does."""
    with pytest.raises(MalformedKeyError, match="hash does not match"):
        sign_note(TEXT, PETER_SKEY.replace("c74f20a3", "c74f20a4"))


# Go vectors: signing ---------------------------------------------------------------------------


def test_signing_the_go_text_gives_the_go_note_byte_for_byte() -> None:
    """Go TestSign (and the package documentation): the exact signed note."""
    want = (
        "If you think cryptography is the answer to your problem,\n"
        "then you don't know what your problem is.\n"
        "\n"
        "\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfq"
        "dngotpRZb6KE6RyyBwJnAM=\n"
    )
    assert sign_note(TEXT, PETER_SKEY) == want
    assert sign_note(TEXT, PETER_SKEY).encode() == want.encode()


def test_resigning_replaces_the_signers_existing_signature() -> None:
    """Go TestSign: an existing signature by the same key is replaced, giving the same note."""
    stale = base64.b64encode(bytes.fromhex("c74f20a3") + bytes(64)).decode()
    note = f"{TEXT}\n\u2014 PeterNeumann {stale}\n"
    assert add_signature(note, PETER_SKEY) == SIGNED


def test_signing_a_text_without_a_final_newline_is_malformed() -> None:
    """Go TestSign: ``Sign(&Note{Text: "abc"})`` fails with "malformed note"."""
    with pytest.raises(MalformedNoteError, match=r"^malformed note"):
        sign_note("abc", PETER_SKEY)


def test_cosigning_a_note_with_a_bad_signer_name_is_malformed() -> None:
    """Go TestSign: a pre-filled signature named ``a+b`` makes the note malformed."""
    with pytest.raises(MalformedNoteError, match=r"^malformed note"):
        add_signature(f"{TEXT}\n\u2014 a+b ABCD\n", PETER_SKEY)


# Go vectors: opening ---------------------------------------------------------------------------


def test_one_known_signature_verifies_and_the_unknown_one_is_kept_aside() -> None:
    """Go TestOpen: Peter known, Enoch not."""
    note = open_note(TEXT + "\n" + PETER_SIG + ENOCH_SIG, [PETER_VKEY])
    assert note == Note(TEXT, (PETER,), (ENOCH,))


def test_both_go_signatures_verify_when_both_keys_are_known() -> None:
    """Go TestOpen, and the doubly signed note of the package documentation."""
    note = open_note(TEXT + "\n" + PETER_SIG + ENOCH_SIG, [PETER_VKEY, ENOCH_VKEY])
    assert note == Note(TEXT, (PETER, ENOCH), ())


def test_a_note_with_only_unknown_signers_is_unverified_and_carries_the_note() -> None:
    """Go TestOpen: no known key gives UnverifiedNoteError, with the parsed note inside."""
    with pytest.raises(UnverifiedNoteError, match=r"^note has no verifiable signatures") as caught:
        open_note(TEXT + "\n" + PETER_SIG + ENOCH_SIG, [])
    assert caught.value.note == Note(TEXT, (), (PETER, ENOCH))
    assert "EnochRoot+af0cfe78" in str(caught.value)


def test_a_verifier_key_given_twice_is_ambiguous_when_used() -> None:
    """Go TestOpen: a duplicated verifier is an error only if a signature names it."""
    keys = [ENOCH_VKEY, PETER_VKEY, ENOCH_VKEY]
    with pytest.raises(AmbiguousKeyError, match=r"^ambiguous key EnochRoot\+af0cfe78") as caught:
        open_note(TEXT + "\n" + ENOCH_SIG, keys)
    assert (caught.value.name, caught.value.key_hash) == ("EnochRoot", 0xAF0CFE78)
    assert open_note(TEXT + "\n" + PETER_SIG, keys).signatures == (PETER,)


@pytest.mark.parametrize("keys", [[PETER_VKEY], []])
def test_more_than_a_hundred_signatures_is_malformed(keys: list[str]) -> None:
    """Go TestOpen: 101 copies of a signature, known or not, make a malformed note."""
    with pytest.raises(MalformedNoteError, match=r"^malformed note") as caught:
        open_note(TEXT + "\n" + PETER_SIG * (MAX_SIGNATURES + 1), keys)
    assert caught.value.line == MAX_SIGNATURES + 1
    assert open_note(TEXT + "\n" + PETER_SIG * MAX_SIGNATURES, [PETER_VKEY]).signatures == (PETER,)


def test_a_bad_signature_by_a_known_key_is_named() -> None:
    """Go TestOpen: four extra base64 characters make Peter's signature invalid."""
    note = TEXT.encode() + b"\n" + _insert_abcd_at_byte_60(PETER_SIG)
    with pytest.raises(InvalidSignatureError) as caught:
        open_note(note, [PETER_VKEY])
    assert str(caught.value) == "invalid signature for key PeterNeumann+c74f20a3"
    assert (caught.value.name, caught.value.key_hash) == ("PeterNeumann", 0xC74F20A3)


def test_repeated_signatures_are_dropped() -> None:
    """Go TestOpen: repeats by a known key, and identical unknown lines, are kept once."""
    enoch_abcd = Signature(
        "EnochRoot",
        0xAF0CFE78,
        "rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n"
        "ABCD"
        "2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=",
    )
    note = (
        (TEXT + "\n" + PETER_SIG + PETER_SIG + ENOCH_SIG + ENOCH_SIG).encode()
    ) + _insert_abcd_at_byte_60(ENOCH_SIG)
    assert open_note(note, [PETER_VKEY]) == Note(TEXT, (PETER,), (ENOCH, enoch_abcd))


@pytest.mark.parametrize(
    "note",
    [
        TEXT.encode(),
        (TEXT + "\n").encode(),
        (TEXT + "\n" + PETER_SIG[:-1]).encode(),
        b"\x01" + (TEXT + "\n" + PETER_SIG).encode(),
        b"\xff" + (TEXT + "\n" + PETER_SIG).encode(),
        (TEXT + "\n" + "\u2014 Bad Name " + PETER.base64).encode(),
        (TEXT + "\n" + PETER_SIG + "Unexpected line.\n").encode(),
    ],
    ids=[
        "no-signatures",
        "blank-line-only",
        "no-final-newline",
        "control-character",
        "invalid-utf8",
        "space-in-name",
        "unexpected-line",
    ],
)
def test_the_go_malformed_notes_are_refused(note: bytes) -> None:
    """Go TestOpen: each of the "invalid encoded message syntax" notes is malformed."""
    with pytest.raises(MalformedNoteError, match=r"^malformed note"):
        open_note(note, [PETER_VKEY])


def test_the_c2sp_example_splits_at_the_last_blank_line() -> None:
    """C2SP signed-note.md: the text may hold blank lines; the last one ends it."""
    note = (
        "Ognuno sta solo sul cuor della terra\ntrafitto da un raggio di sole:\n"
        "\ned è subito sera.\n"
        "\n\u2014 quasimodo.example/salvatore NnugSzTjtVAewIS+Z/iJhUPeFDkO/5QQ2i5ddnGITLlC+EhfLW9o"
        "JKONrMouFSQU0xMcXxj99ihAQwaqP3ZekRwNtIc=\n"
    )
    with pytest.raises(UnverifiedNoteError) as caught:
        open_note(note, [PETER_VKEY])
    assert caught.value.note.text.endswith(":\n\ned è subito sera.\n")
    assert [s.name for s in caught.value.note.unverified] == ["quasimodo.example/salvatore"]


# Our rules -------------------------------------------------------------------------------------


def test_base64_with_nonzero_padding_bits_is_refused() -> None:
    """Go's decoder ignores padding bits, so ``...JnAN=`` would pass there; we refuse it."""
    assert PETER_SIG.endswith("JnAM=\n")
    with pytest.raises(MalformedNoteError, match="canonical"):
        open_note(TEXT + "\n" + PETER_SIG.replace("JnAM=", "JnAN="), [PETER_VKEY])


@pytest.mark.parametrize("text", ["a\tb\n", "a\rb\n", "\x00\n"])
def test_signing_a_text_the_verifier_would_refuse_is_malformed(text: str) -> None:
    """Go's Sign signs control characters Open then refuses; we refuse at signing."""
    with pytest.raises(MalformedNoteError, match="control character"):
        sign_note(text, PETER_SKEY)


def test_a_single_key_string_is_not_taken_for_a_list_of_keys() -> None:
    """A bare string would iterate as characters; it is refused with a clear message."""
    with pytest.raises(TypeError, match="not one key string"):
        open_note(SIGNED, PETER_VKEY)


def test_a_signer_key_given_as_a_verifier_is_named_and_not_quoted() -> None:
    """Passing the private key where a public one belongs says so and never echoes it."""
    with pytest.raises(MalformedKeyError, match=r"signer \(private\) key") as caught:
        open_note(SIGNED, [PETER_SKEY])
    assert SEED_TEXT not in str(caught.value)


def test_a_verifier_key_given_as_a_signer_is_named() -> None:
    """Passing the public key where the private one belongs says so."""
    with pytest.raises(MalformedKeyError, match=r"verifier \(public\) key"):
        sign_note(TEXT, PETER_VKEY)


@pytest.mark.parametrize("name", ["", "a b", "a+b", "a\u3000b", "a\u2028b", "a\x85b", "a\x1fb"])
def test_generating_a_key_for_a_bad_name_is_refused(name: str) -> None:
    """Names follow Go's rule (no Unicode space, no '+', non-empty), and no control characters."""
    with pytest.raises(MalformedKeyError):
        generate_key(name)


def test_a_zero_width_space_is_not_a_space_to_go() -> None:
    """U+200B is not White_Space, so Go (and we) accept it in a name."""
    signer, verifier = generate_key("a\u200bb")
    assert open_note(sign_note(TEXT, signer), [verifier]).signatures[0].name == "a\u200bb"


@given(
    name=st.text(
        st.characters(
            blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp"), blacklist_characters="+"
        ),
        min_size=1,
        max_size=20,
    ),
    text=st.text(st.characters(blacklist_categories=("Cs", "Cc")) | st.just("\n"), max_size=200),
)
def test_generated_keys_sign_notes_their_verifiers_open(name: str, text: str) -> None:
    """Any valid name and any text round-trip: sign, then open with the verifier key."""
    signer, verifier = generate_key(name)
    assert signer.startswith(f"PRIVATE+KEY+{name}+")
    assert verifier.startswith(f"{name}+")
    note = open_note(sign_note(text + "\n", signer), [verifier])
    assert note.text == text + "\n"
    assert [s.name for s in note.signatures] == [name]


def _flip(note: bytes, position: int, value: int) -> bytes:
    """``note`` with the byte at ``position`` replaced by ``value``."""
    return note[:position] + bytes([value]) + note[position + 1 :]


@given(data=st.data())
def test_any_single_altered_byte_is_refused(data: st.DataObject) -> None:
    """Changing any one byte of the text, separator or signature line makes open_note raise."""
    note = SIGNED.encode()
    position = data.draw(st.integers(0, len(note) - 1), label="position")
    value = data.draw(st.integers(0, 255).filter(lambda v: v != note[position]), label="value")
    with pytest.raises(NoteError):
        open_note(_flip(note, position, value), [PETER_VKEY])


def test_every_position_is_covered_by_tampering() -> None:
    """Exhaustively: flipping the low bit of each byte in turn is always refused."""
    note = SIGNED.encode()
    for position in range(len(note)):
        with pytest.raises(NoteError):
            open_note(_flip(note, position, note[position] ^ 1), [PETER_VKEY])


def test_cosigning_appends_after_the_existing_signatures() -> None:
    """Witness co-signing: existing lines stay first, in order; the new line comes last."""
    witness_skey, witness_vkey = generate_key("witness.example/w1")
    cosigned = add_signature(TEXT + "\n" + PETER_SIG + ENOCH_SIG, witness_skey)
    assert cosigned.startswith(TEXT + "\n" + PETER_SIG + ENOCH_SIG + "\u2014 witness.example/w1 ")
    opened = open_note(cosigned, [PETER_VKEY, ENOCH_VKEY, witness_vkey])
    assert [s.name for s in opened.signatures] == [
        "PeterNeumann",
        "EnochRoot",
        "witness.example/w1",
    ]
    assert add_signature(cosigned, witness_skey) == cosigned


def test_cosigning_keeps_identical_lines_once() -> None:
    """As Go's Open then Sign: an identical repeated line is written once."""
    cosigned = add_signature(TEXT + "\n" + ENOCH_SIG + ENOCH_SIG, PETER_SKEY)
    assert cosigned == TEXT + "\n" + ENOCH_SIG + PETER_SIG


def test_cosigning_a_full_note_is_refused() -> None:
    """A note that already has 100 signatures cannot take another that Open would read."""
    lines = []
    for _ in range(MAX_SIGNATURES):
        lines.append(add_signature(SIGNED, generate_key("w")[0]).splitlines()[-1] + "\n")
    with pytest.raises(MalformedNoteError, match="already carries 100"):
        add_signature(TEXT + "\n" + "".join(lines), PETER_SKEY)


# Key files -------------------------------------------------------------------------------------


def test_a_key_pair_is_written_with_private_and_public_modes(tmp_path: Path) -> None:
    """NAME.key is 0600 and holds the signer key; NAME.vkey is 0644; both read back."""
    key_path, vkey_path = write_key_pair("log.example/ledger", tmp_path)
    assert (key_path.name, vkey_path.name) == ("log.example_ledger.key", "log.example_ledger.vkey")
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(vkey_path.stat().st_mode) == 0o644
    signer, verifier = read_signer_key(key_path), read_verifier_key(vkey_path)
    assert key_path.read_text() == signer + "\n"
    assert read_verifier_key(str(vkey_path)) == verifier
    assert open_note(sign_note(TEXT, signer), [verifier]).signatures[0].name == "log.example/ledger"


def test_writing_a_key_pair_never_overwrites(tmp_path: Path) -> None:
    """An existing .key or .vkey is refused by name, and nothing new is left behind."""
    key_path, _ = write_key_pair("ledger", tmp_path)
    before = key_path.read_bytes()
    with pytest.raises(FileExistsError, match="refusing to overwrite") as caught:
        write_key_pair("ledger", tmp_path)
    assert caught.value.filename == str(key_path)
    assert key_path.read_bytes() == before
    (tmp_path / "other.vkey").write_text("taken\n")
    with pytest.raises(FileExistsError):
        write_key_pair("other", tmp_path)
    assert not (tmp_path / "other.key").exists()


def test_a_verifier_key_file_read_as_a_signer_is_named(tmp_path: Path) -> None:
    """Giving the .vkey where the .key belongs names the mistake and the file."""
    _, vkey_path = write_key_pair("ledger", tmp_path)
    with pytest.raises(MalformedKeyError, match=r"verifier \(public\) key") as caught:
        read_signer_key(vkey_path)
    assert caught.value.path == vkey_path


def test_a_signer_key_file_read_as_a_verifier_is_named_and_not_quoted(tmp_path: Path) -> None:
    """Giving the .key where the .vkey belongs says so, without the secret."""
    key_path, _ = write_key_pair("ledger", tmp_path)
    # PRIVATE+KEY+<name>+<hash>+<base64 key>: the key itself may hold "+" (base64), so split at
    # the fourth "+" only (a last segment after a "+" inside it can be as short as one digit)
    secret = key_path.read_text().strip().split("+", 4)[4]
    assert len(secret) >= 40
    with pytest.raises(MalformedKeyError, match=r"signer \(private\) key") as caught:
        read_verifier_key(key_path)
    assert secret not in str(caught.value)
    assert secret not in repr(caught.value)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "empty"),
        (b"\xff\xfe", "not UTF-8"),
        (PETER_SKEY.encode() + b"\n" + PETER_SKEY.encode(), "more than one"),
        (PETER_SKEY.replace("c74f20a3", "c74f20a4").encode(), "hash does not match"),
    ],
)
def test_a_broken_signer_key_file_is_refused_clearly(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    """Empty, binary, multi-line or inconsistent files are refused, never quoting the seed."""
    path = tmp_path / "broken.key"
    path.write_bytes(content)
    with pytest.raises(MalformedKeyError, match=reason) as caught:
        read_signer_key(path)
    assert SEED_TEXT not in str(caught.value)


def test_a_verifier_key_text_that_is_neither_key_nor_file_is_refused() -> None:
    """A string with no '+' that names no file is neither a key text nor a key file."""
    with pytest.raises(MalformedKeyError, match="neither a key file"):
        read_verifier_key("no-such-file.vkey")
