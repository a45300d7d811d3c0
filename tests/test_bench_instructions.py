"""`python -m bench.instructions`: its workload runs, and bad arguments are refused."""

from __future__ import annotations

import pytest

from bench import instructions


def test_the_counted_workloads_run_without_valgrind() -> None:
    """Each workload valgrind counts runs on its own (bare and instrumented calls, none)."""
    for mode in ("none", "bare", "instrumented"):
        assert instructions.main(["--workload", mode, "--calls", "2"]) == 0


def test_a_call_count_below_one_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """--calls 0 is an error that names the option."""
    with pytest.raises(SystemExit):
        instructions.main(["--calls", "0"])
    assert "--calls must be at least 1" in capsys.readouterr().err


def test_valgrind_output_is_read_for_its_instruction_count() -> None:
    """The count is read from cachegrind's summary line, thousands separators and all."""
    found = instructions._REFS.search("==1== I   refs:      1,349,338,386\n")
    assert found is not None
    assert int(found.group(1).replace(",", "")) == 1_349_338_386
