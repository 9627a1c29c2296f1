"""Files that command-line options name (`check --policy-config FILE`, `cost --prices FILE`):
read as JSON, and when one is not what the option takes, one line that names the option and the
file (and the line and column of a JSON error), exit 2 -- never a bare parser error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class OptionFileError(Exception):
    """A file the command line names (or, for `stacks`, a stack file's name) cannot be used:
    exit 2, like a wrong command line."""


def read_json_object(path: Path, option: str, what: str) -> dict[str, Any]:
    """The JSON object in `path`, which `option` named; `what` says what it should be."""
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise OptionFileError(f"{option} {path}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise OptionFileError(f"{option} {path}: is not UTF-8 text, so not {what} in JSON") from None
    except json.JSONDecodeError as exc:
        raise OptionFileError(f"{option} {path}:{exc.lineno}:{exc.colno}: is not JSON ({exc.msg}); expected {what}") from None
    except RecursionError:
        raise OptionFileError(f"{option} {path}: nests too deeply to be {what}") from None
    if not isinstance(data, dict):
        raise OptionFileError(f"{option} {path}: is a JSON {type(data).__name__}, expected {what} (a JSON object)")
    return data
