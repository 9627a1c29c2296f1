"""Files that command-line options name (`check --policy-config FILE`, `cost --prices FILE`):
read as JSON, and when one is not what the option takes, one line that names the option and the
file (and the line and column of a JSON error), exit 2 -- never a bare parser error."""

from __future__ import annotations

import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any

MAX_OPTION_FILE = 16 << 20  # a policy config or price list is a few KiB


class OptionFileError(Exception):
    """A file the command line names (or, for `stacks`, a stack file's name) cannot be used:
    exit 2, like a wrong command line."""


def regular_file_bytes(path: Path, option: str, limit: int = MAX_OPTION_FILE) -> bytes:
    """The bytes of `path` if it is a regular file (a link to one is fine) of at most `limit`
    bytes: a FIFO, a device or a directory is refused at once (reading a FIFO would wait for ever)."""
    if not stat.S_ISREG(path.stat().st_mode):
        raise OptionFileError(f"{option} {path}: is not a regular file (a FIFO, a device or a directory?)")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):  # swapped since: refused all the same
            raise OptionFileError(f"{option} {path}: is not a regular file")
        data = file.read(limit + 1)
    if len(data) > limit:
        raise OptionFileError(f"{option} {path}: is more than {limit:,} bytes")
    return data


def read_json_object(path: Path, option: str, what: str) -> dict[str, Any]:
    """The JSON object in `path`, which `option` named; `what` says what it should be."""
    try:
        data = json.loads(regular_file_bytes(path, option).decode("utf-8"))
    except OSError as exc:
        raise OptionFileError(f"{option} {path}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise OptionFileError(f"{option} {path}: is not UTF-8 text, so not {what} in JSON") from None
    except json.JSONDecodeError as exc:
        raise OptionFileError(
            f"{option} {path}:{exc.lineno}:{exc.colno}: is not JSON ({exc.msg}); expected {what}"
        ) from None
    except RecursionError:
        raise OptionFileError(f"{option} {path}: nests too deeply to be {what}") from None
    if not isinstance(data, dict):
        raise OptionFileError(f"{option} {path}: is a JSON {type(data).__name__}, expected {what} (a JSON object)")
    return data


def replace_file(path: Path, text: str) -> None:
    """Write `text` as the file `path` names: into a new file beside it, then renamed over it, so
    a link found there (symbolic or hard) is replaced, never written through: a link planted in a
    folder of reports, or a hard link to a stack file, cannot turn a report into an overwrite of
    the file it points at."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as for any new file
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
