"""How every reporting command prints, the same way for all of them.

- text that fits `views.WIDTH` (120) columns on stdout, or with `--json` stable JSON (sorted keys,
  floats rounded to cents) on stdout;
- `-o json|yaml|text` prints the report in that format (kubectl's `-o`); `--output FILE` (or `-o`
  with any other value) writes what would have been printed (text, or JSON with `--json`) to FILE;
  the old `--json PATH` still writes the JSON to PATH and prints the text; neither ever writes
  over the project's own files (Pulumi.yaml, stacks/, policies/), a symbolic link resolved first;
- failures and refusals on stderr (`error: ...`), one line each; the exit status says the verdict;
- colour only on a terminal, never with NO_COLOR set to a non-empty value (no-color.org) or TERM=dumb.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from infra.core.stack_values import terminal_safe
from infra.offline.option_files import replace_file

JSON_HELP = (
    "print the report as JSON (stable keys, money rounded to cents); --json PATH also works: writes JSON to "
    "PATH, prints the text"
)
OUTPUT_HELP = (
    "-o json|yaml|text: the report in that format on stdout (kubectl's -o); any other value is a FILE the report "
    "(text, or JSON with --json) is written to instead of stdout (a file named json: -o ./json)"
)
FORMATS = ("json", "yaml", "text")  # `-o FORMAT`, kubectl's way; anything else after -o is a file


class UsageError(Exception):
    """The command line itself is wrong (exit 2, like argparse's own errors)."""


def add_report_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--json", metavar="PATH", nargs="?", const="-", help=JSON_HELP)
    command.add_argument("--output", "-o", metavar="FORMAT|FILE", help=OUTPUT_HELP)


def add_json_option(command: argparse.ArgumentParser, what: str) -> None:
    """`--json` alone, for a command that writes files and reports what it wrote (init, charts),
    and `-o json|yaml|text` as every report takes it (never a file: the command writes its own)."""
    command.add_argument("--json", action="store_const", const="-", help=f"print {what} as JSON")
    command.add_argument(
        "--output", "-o", choices=FORMATS, metavar="FORMAT", help=f"-o json|yaml|text: {what} in that format"
    )


def stable(value: Any) -> Any:
    """`value` with every float rounded to 2 decimals (cents; ratios to a hundredth), recursively."""
    if isinstance(value, float):
        return round(value, 2)
    if isinstance(value, dict):
        return {str(k): stable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [stable(v) for v in value]
    return value


def json_text(data: Any) -> str:
    return json.dumps(stable(data), indent=2, sort_keys=True) + "\n"


def emit(args: argparse.Namespace, data: Callable[[], Any], text: Callable[[], str]) -> None:
    """Print (or write) one report as the options ask: `data()` is its JSON, `text()` its text."""
    _one_format(args)
    json_target, output = getattr(args, "json", None), getattr(args, "output", None)
    if json_target not in (None, "-"):  # the old form: --json PATH writes the JSON, whatever -o prints
        write_report("--json", Path(json_target), json_text(data()))
        json_target = None
    if output in FORMATS:  # `-o json|yaml|text`: a format on stdout, not a file of that name
        fmt, output = output, None
        if fmt == "yaml":
            import yaml

            plain = json.loads(json_text(data()))  # the JSON's values, whatever types the report holds
            sys.stdout.write(yaml.safe_dump(plain, sort_keys=True, allow_unicode=True, width=1000))
            return
        json_target = "-" if fmt == "json" else None
    content = json_text(data()) if json_target == "-" else text().rstrip("\n") + "\n"
    if output:
        write_report("--output", Path(output), content)
    else:
        sys.stdout.write(content)


def _one_format(args: argparse.Namespace) -> None:
    json_target, output = getattr(args, "json", None), getattr(args, "output", None)
    if json_target == "-" and output in ("yaml", "text"):  # two formats asked for: never one silently
        raise UsageError(f"--json and -o {output} ask for two formats: give one")


def check_report_options(args: argparse.Namespace, *files: tuple[str, str | None]) -> None:
    """Refuse, before a command that takes long or costs (verify) does anything, the report options `emit` would
    refuse only once the report is made: two formats, a project's own file, a file that cannot be written. `files`
    are more (option, path) the command writes itself, making their folder (`report_folder`). Nothing is created."""
    _one_format(args)
    json_target, output = getattr(args, "json", None), getattr(args, "output", None)
    for option, target in (("--json", None if json_target == "-" else json_target), ("--output", output)):
        if target and target not in FORMATS:
            _writable(option, Path(target), Path(target).parent)
    for option, target in files:
        if target:
            path = Path(target)
            folder = next(f for f in [path.parent, *path.parent.parents] if f.exists() or f == Path(f.anchor))
            _writable(option, path, folder)


def _writable(option: str, path: Path, folder: Path) -> None:
    """A usage error naming `option` unless `path` may be written: not a project's own file, not a folder, and
    itself writable, else `folder` (its own, or the one its folders would be made in) a folder that may be written."""
    _not_protected(option, path)
    if path.is_dir():
        raise UsageError(f"{option} {path}: is a folder, not a file to write")
    if path.exists() or path.is_symlink():
        usable = os.access(path, os.W_OK)
    else:
        usable = folder.is_dir() and os.access(folder, os.W_OK)
    if not usable:
        why = (
            "permission denied"
            if folder.is_dir()
            else f"{folder} is not a folder"
            if folder.exists()
            else "no such folder"
        )
        raise UsageError(f"{option} {path}: cannot write it ({why})")


# What a report may never be written over: the stack files, the policy pack and its configs, the project file.
PROTECTED = ("Pulumi.yaml", "stacks", "policies")


def protected(path: Path) -> str | None:
    """The project file `path` would write over (after resolving links), or None."""
    from infra.core.project import project_root

    target = path.resolve()
    for root in {project_root(), project_root(path.parent if path.parent.exists() else None)}:
        for name in PROTECTED:
            kept = root / name
            if target == kept or kept in target.parents:
                return str(target.relative_to(root))
    return None


def _not_protected(option: str, path: Path) -> None:
    kept = protected(path)
    if kept is not None:
        raise UsageError(
            f"{option} {path}: would write over {kept}, one of the project's own files "
            "(Pulumi.yaml, stacks/, policies/): write the report elsewhere"
        )


def write_report(option: str, path: Path, content: str) -> None:
    """Write a report to the file an option names; a path that cannot be written, or that is (or
    links to) one of the project's own files, is a usage error naming the option (exit 2)."""
    _not_protected(option, path)
    try:
        if path.is_symlink() or (path.exists() and not path.is_file()):
            path.write_text(content)  # a device or a FIFO (`--output >(gzip > r.gz)`), or a link checked above
        else:
            replace_file(path, content)  # a hard link to a stack file keeps the stack's text
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot write it ({exc.strerror or type(exc).__name__})") from None
    print(f"wrote {terminal_safe(str(path))}", file=sys.stderr)


def report_folder(option: str, path: Path) -> Path:
    """The folder an option names for files to be written into (`charts --out`, `plan --manifests`),
    made if missing; a file, or a folder among the project's own (Pulumi.yaml, stacks/, policies/,
    after resolving links), is a usage error naming the option (exit 2), before anything is written."""
    kept = protected(path / "_")
    if kept is not None:
        raise UsageError(
            f"{option} {path}: is {kept.rsplit('/', 1)[0]}, among the project's own files "
            "(Pulumi.yaml, stacks/, policies/): write into another folder"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UsageError(f"{option} {path}: is a file, not a folder to write into") from None
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot make it ({exc.strerror or type(exc).__name__})") from None
    return path


def error(message: str) -> None:
    """A failure or refusal: one line on stderr."""
    print(f"{paint('error:', 'red', colour_on(sys.stderr))} {message}", file=sys.stderr)


_COLOURS = {"red": "31", "green": "32", "yellow": "33", "bold": "1"}


def colour_on(stream: IO[str] | None) -> bool:
    return (
        stream is not None and stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
    )  # an empty NO_COLOR is unset (no-color.org)


def paint(text: str, colour: str, on: bool) -> str:
    """`text` in `colour` when `on` (see `colour_on`: the caller knows where the text goes)."""
    return f"\x1b[{_COLOURS[colour]}m{text}\x1b[0m" if on else text
