"""Every command of ``poet`` and every option of each stay as they are: the parser is compared with a
record taken before the command line moved into ``poet/cli/`` (tests/data/cli_options.json).

Regenerate the record only when a command or option is meant to change:
``python tests/test_cli_options.py > tests/data/cli_options.json``."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path

import pytest

from poet.cli import build_parser, main

RECORD = Path(__file__).resolve().parent / "data" / "cli_options.json"


def describe(parser: argparse.ArgumentParser) -> list[dict]:
    """Each argument of a parser as the user meets it: its flags (or name), destination, default,
    choices, whether it is required and how many values it takes."""
    out = []
    for action in parser._actions:  # argparse keeps no public list of its arguments
        if isinstance(action, argparse._SubParsersAction):
            continue
        default = action.default
        if default is not None and not isinstance(default, (str, int, float, bool, list)):
            default = repr(default)
        out.append(
            {
                "flags": list(action.option_strings) or [action.dest],
                "dest": action.dest,
                "default": default,
                "choices": None if action.choices is None else sorted(map(str, action.choices)),
                "required": bool(action.required),
                "nargs": action.nargs,
                "kind": type(action).__name__,
            }
        )
    return out


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def record() -> dict:
    p = build_parser()
    return {"poet": describe(p), **{name: describe(sp) for name, sp in commands(p).items()}}


def test_every_command_and_option_is_as_recorded():
    want = json.loads(RECORD.read_text())
    got = record()
    assert sorted(got) == sorted(want), "commands added or lost"
    for name in want:
        assert got[name] == want[name], f"the options of `poet {name}` changed"


@pytest.mark.parametrize("argv", [["--help"]] + [[name, "--help"] for name in sorted(commands(build_parser()))])
def test_help_lists_every_recorded_option(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(argv)
    assert rc == 0
    text = out.getvalue()
    name = argv[0] if argv[0] != "--help" else "poet"
    assert text.startswith(f"usage: poet {name}" if name != "poet" else "usage: poet ")
    for arg in json.loads(RECORD.read_text())[name]:
        for flag in arg["flags"]:
            if flag.startswith("-"):
                assert flag in text, f"`poet {' '.join(argv)}` does not list {flag}"
    if name == "poet":
        for command in commands(build_parser()):
            assert command in text


if __name__ == "__main__":
    sys.stdout.write(json.dumps(record(), indent=1, sort_keys=True) + "\n")
