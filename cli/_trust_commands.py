"""CLI commands of the transparency log: keys, checkpoint, prove.

`keys generate` makes an Ed25519 signing key pair in the signed-note text forms; `checkpoint`
integrates pending events into the ledger-wide Merkle log and prints a signed checkpoint (and
publishes it to a directory outside the database); `prove` prints an inclusion proof of one
event as JSON. Checking against checkpoints is `verify --checkpoint` (cli/_ledger_commands.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from agentledger.cli._common import (
    CliError,
    open_ledger,
    plural,
    resolve_run,
    whole_number,
    write_output,
)
from agentledger.ledger.signed_note import (
    NoteError,
    read_signer_key,
    read_verifier_key,
    write_key_pair,
)

__all__ = ["read_checkpoint_file", "register", "verifier_keys", "verify_file_command"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this module's commands."""
    p = sub.add_parser("keys", help="signing keys for checkpoints")
    keys = p.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    g = keys.add_parser("generate", help="write NAME.key (secret, 0600) and NAME.vkey (public)")
    g.add_argument("name", help="the log's name, e.g. example.com/agent-ledger (the origin)")
    g.add_argument("--out", default=".", help="directory to write the two files to (default .)")
    g.set_defaults(func=cmd_keys_generate)

    p = sub.add_parser(
        "checkpoint", help="add new events to the transparency log and print a signed checkpoint"
    )
    p.add_argument("--key", required=True, help="the signer key file (NAME.key)")
    p.add_argument("-o", "--output", help="write the checkpoint to this file instead of stdout")
    p.add_argument(
        "--publish",
        metavar="DIR",
        help="also append it, numbered, to this directory (refused if it does not extend the "
        "last one there)",
    )
    p.set_defaults(func=cmd_checkpoint)

    p = sub.add_parser("prove", help="print an inclusion proof of a run's event as JSON")
    p.add_argument("run", help="run id or a unique prefix")
    p.add_argument(
        "--position", type=whole_number, help="the event (default: the last one covered)"
    )
    p.add_argument("--checkpoint", required=True, help="a signed checkpoint file")
    p.add_argument("--vkey", action="append", default=[], help="check its signature first")
    p.set_defaults(func=cmd_prove)


def _signer(path: str) -> str:
    try:
        return read_signer_key(Path(path))
    except OSError as e:
        raise CliError(f"cannot read the signer key: {e}") from None
    except NoteError as e:
        raise CliError(str(e)) from None


def verifier_keys(values: list[str]) -> list[str]:
    """Verifier keys from --vkey values (files or key texts), with clear errors."""
    keys = []
    for value in values:
        try:
            keys.append(read_verifier_key(value))
        except OSError as e:
            raise CliError(f"cannot read the verifier key {value!r}: {e}") from None
        except NoteError as e:
            raise CliError(str(e)) from None
    return keys


def cmd_keys_generate(args: argparse.Namespace) -> int:
    """Write a key pair."""
    directory = Path(args.out)
    if not directory.is_dir():
        raise CliError(f"--out {args.out!r} is not a directory")
    try:
        key_path, vkey_path = write_key_pair(args.name, directory)
    except FileExistsError as e:
        raise CliError(f"{e.filename} exists; refusing to overwrite a key") from None
    except NoteError as e:
        raise CliError(str(e)) from None
    print(f"signer key (keep it secret, never in the database): {key_path}", file=sys.stderr)
    print(f"verifier key (give it to auditors): {vkey_path}", file=sys.stderr)
    print(vkey_path.read_text(encoding="utf-8").strip())
    return 0


def cmd_checkpoint(args: argparse.Namespace) -> int:
    """Integrate and sign."""
    signer = _signer(args.key)
    with open_ledger(args, create=False) as ledger:
        progress = None
        if sys.stderr.isatty():

            def progress(size: int) -> None:
                print(f"\rintegrated {size:,} events", end="", file=sys.stderr, flush=True)

        ledger.integrate(progress=progress)
        if progress is not None:
            print(file=sys.stderr)
        note = ledger.checkpoint(signer, publish=args.publish)
    write_output(args.output, note)
    if args.publish:
        print(f"published to {args.publish}", file=sys.stderr)
    return 0


def cmd_prove(args: argparse.Namespace) -> int:
    """Print an inclusion proof."""
    note = read_checkpoint_file(args.checkpoint)
    keys = verifier_keys(args.vkey)
    with open_ledger(args, create=False) as ledger:
        run_id = resolve_run(ledger, args.run)
        proof = ledger.prove(run_id, args.position, checkpoint=note, verifier_keys=keys)
    print(json.dumps(proof, indent=2, ensure_ascii=False))
    return 0


def read_checkpoint_file(path: str) -> str:
    """A checkpoint file's text, with a clear error."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"cannot read the checkpoint {path!r}: {e}") from None


def verify_file_command(args: argparse.Namespace) -> int:
    """``verify --file EXPORT --vkey KEY``: an export file checked offline, no database."""
    from agentledger.ledger import verify_export

    if not args.vkey:
        raise CliError("verify --file needs --vkey: the verifier key that signs its checkpoint")
    if args.run or args.checkpoint or args.deep:
        raise CliError("verify --file takes no RUN, --checkpoint or --deep: the file holds all")
    if not Path(args.file).is_file():
        raise CliError(f"verify --file: {args.file!r} is not a file")
    result = verify_export(
        args.file, verifier_keys(args.vkey), allow_uncovered=args.allow_uncovered
    )
    for refused in result.refused:
        print(f"BROKEN {args.file}: {refused}")
    for problem in result.report.problems:
        print(f"BROKEN {problem}")
    for log_problem in result.report.log_problems:
        print(f"BROKEN {log_problem}")
    if not result.ok:
        print(f"BROKEN: {args.file}")
        return 1
    body = result.checkpoint
    assert body is not None
    report = result.report
    late = result.not_covered
    tail = (
        f"; {plural(len(late), 'later event')} (positions {late[0]}..{late[-1]}) "
        f"{'is' if len(late) == 1 else 'are'} not covered"
        if late
        else "; every event is covered"
    )
    print(
        f"intact: {args.file}: {plural(report.events_checked, 'event')}, "
        f"{plural(report.blobs_checked, 'blob')}; {plural(result.covered, 'event')} proven in "
        f"{body.origin}'s signed checkpoint of {plural(body.size, 'event')}{tail}"
    )
    if not result.ended:
        print(
            "note: the run in this file has no end event (RunCompleted or RunFailed): the file "
            "proves the events it holds, not that the run stops there",
            file=sys.stderr,
        )
    return 0
