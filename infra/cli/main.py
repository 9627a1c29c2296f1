"""`higgsfield`: offline tools around the Pulumi program (no CLI, no credentials needed).

higgsfield COMMAND STACK ...   (`higgsfield --help` lists the commands; docs/reference/cli.md)
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import sys
import traceback
from collections.abc import Sequence

from infra.cli.commands import (
    bootstrap,
    charts,
    check,
    completion,
    cost,
    diff,
    healthcheck,
    image,
    init,
    jobs,
    plan,
    preflight,
    schema,
    stacks,
    timeline,
    types,
    verify,
)
from infra.cli.output import UsageError, colour_on
from infra.core.stack_values import terminal_safe
from infra.offline.evaluate import StackNotFound
from infra.offline.option_files import OptionFileError
from infra.offline.stack_file import StackFileError
from infra.offline.stack_file import shown as _shown

# The commands in the order `higgsfield --help` lists them; each module holds its options and its run.
COMMANDS = (
    plan,
    check,
    diff,
    cost,
    timeline,
    preflight,
    verify,
    charts,
    init,
    types,
    healthcheck,
    jobs,
    stacks,
    bootstrap,
    image,
    schema,
    completion,
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        """argparse's usage errors in one line, like every other failure."""
        # the message echoes what was typed: its control characters escaped, a long value cut
        print(terminal_safe(f"error: {self.prog}: {message} (see `{self.prog} --help`)", 500), file=sys.stderr)
        raise SystemExit(2)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"higgsfield {version('higgsfield')}"
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "higgsfield (not installed: pip install -e .)"


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="higgsfield",
        description="Offline tools for the Higgsfield Pulumi program: no cloud, no credentials "
        "(except preflight and cost --refresh). Every command names the stack first.",
        epilog="Reports take --json (stable JSON on stdout) and --output FILE; failures are one line on stderr "
        "(exit 2: the stack or command line is wrong, 1: a check failed). Completion: higgsfield completion bash.",
    )
    p.add_argument("--version", action="version", version=_version())
    p.add_argument(
        "--debug",
        action="store_true",
        help="also print the traceback of a failure (anywhere on the command line; same exit status)",
    )
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return p


@functools.cache
def _parsing() -> argparse.ArgumentParser:
    """The parser main() reads command lines with: built once a process (about 9 ms), as nothing in
    it depends on the folder or the environment and argparse leaves it as it was after a parse."""
    return parser()


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Every failure is one line on stderr (exit 2: the stack or the command
    line is wrong; 1: anything else); --debug adds its traceback, the exit status stays the same."""
    from infra.config import ConfigError

    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv  # wherever it stands: `higgsfield plan dev --debug` too
    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions (argcomplete's protocol)
        import argcomplete

        argcomplete.autocomplete(parser())
    p = _parsing()
    args = p.parse_args([a for a in argv if a != "--debug"])
    args.debug = debug
    args.parser = parser  # `schema` documents the command line it is part of
    args.colour = colour_on(sys.stdout) and not getattr(args, "output", None) and getattr(args, "json", None) is None

    def failed(code: int, *lines: str) -> int:
        if debug:
            traceback.print_exc(file=sys.stderr)
        for line in lines:
            print(terminal_safe(line), file=sys.stderr)
        return code

    try:
        os.getcwd()
    except FileNotFoundError:  # every command looks for Pulumi.yaml from here
        return failed(2, "error: the working directory no longer exists (deleted since the shell entered it): cd again")
    try:
        return args.func(args)
    except (BrokenPipeError, KeyboardInterrupt):
        raise
    except ConfigError as exc:
        source = getattr(exc, "source", None)
        return failed(
            2, *(source.report(exc.problems) if source else [f"error: {p.key}: {p.message}" for p in exc.problems])
        )
    except StackFileError as exc:
        return failed(2, f"{_shown(exc.path)}:{exc.line}: {exc.message}")
    except (StackNotFound, UsageError, OptionFileError) as exc:
        return failed(2, f"error: {exc}")
    except Exception as exc:  # noqa: BLE001 - what nobody foresaw still ends in one line
        hint = "" if debug else "; rerun with --debug for the traceback"
        return failed(1, f"error: {_one_line(exc)} ({type(exc).__name__}{hint})")


def _reader_went_away() -> int:
    """stdout's reader closed the pipe (`higgsfield check prod | head -1`): what is left to print
    goes nowhere, and the exit status is a SIGPIPE death's, as for any Unix filter."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 128 + 13  # SIGPIPE


def run() -> None:
    """The console script, tuned for a short-lived process (measured on 2 cores with
    `benchmarks/plan_time.py` and `/usr/bin/time`):
    - no cyclic garbage collection: importing the Pulumi SDKs creates hundreds of thousands of
      typing objects, and collecting them while nothing is garbage cost 0.6 s of a 3 s `plan`;
      reference counting still frees what a run drops;
    - no interpreter teardown of the SDK's module graph and threads (0.6-0.9 s), with nothing to
      flush but stdout and stderr (files are written and closed by then)."""
    gc.disable()
    if sys.stderr is None:  # started with stderr closed (`2>&-`): failures are said by the exit status alone
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - for the life of the process
    if hasattr(sys.stdout, "reconfigure"):  # an ASCII terminal (PYTHONIOENCODING=ascii, a Latin-1 locale): a
        sys.stdout.reconfigure(errors="backslashreplace")  # character it lacks is escaped (▸ as \u25b8), never fatal
    if sys.stdout is None:  # started with stdout closed (`>&-`): nothing it prints could go anywhere
        print(
            "error: standard output is closed: nothing can be printed (use --output FILE, or > /dev/null)",
            file=sys.stderr,
        )
        os._exit(2)
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        code = _reader_went_away()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    except SystemExit as exc:  # --help, --version and usage errors
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            code = _reader_went_away()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
