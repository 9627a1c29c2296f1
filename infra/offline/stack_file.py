"""Reading a stack file (stacks/Pulumi.<stack>.yaml) so that no input can hurt: any bytes at all
give `file:line key: message` lines, never a traceback.

The YAML is composed into nodes (which keep their line) and turned into values here, not by
PyYAML's constructor, so that
- a key written twice in one mapping is an error (PyYAML
  would silently keep the last one, and a prod file would become dev);
- only a regular file is read (not a directory, a FIFO, a device or a symbolic link: a link's
  target is no stack file, and its text would be echoed in messages), and at most `MAX_BYTES`;
- aliases are followed at most `MAX_VALUES` times in all, and the values they expand to hold at
  most `MAX_EXPANDED` characters (one long string aliased 95,000 times is refused in
  milliseconds, not expanded to gigabytes; composing is linear in the file's size);
- every value's line is known (`line_of`), and so is the text of an unquoted scalar YAML read as
  a number or a boolean (`kubernetesVersion: 1.30` is the number 1.3), for hints;
- encrypted values (`key: {secure: ...}`, at the top or inside a setting) are recorded as secret
  where they are: unknown offline, never checked as values, while everything around them is
  (infra/core/stack_values.py); Pulumi ESC imports (`environment: [...]`) are accepted and noted.

The top-level keys of a stack file are Pulumi's (pulumi/pulumi:sdk/go/common/workspace/project.go,
type ProjectStack: secretsprovider, encryptedkey, encryptionsalt, config, and environment, "an
optional environment definition or list of environments"; read in the stored copy of that file).
"""

from __future__ import annotations

import difflib
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from infra.core.names import NAMESPACE
from infra.core.stack_values import UNKNOWN_SECRET, Problem, credential_in, is_secret, key_of, secret_placeholder

STACK_FILE_KEYS = ("config", "environment", "secretsprovider", "encryptedkey", "encryptionsalt")
MAX_BYTES = 1 << 20  # a stack file with 100 GPU pools is about 20 KiB
MAX_VALUES = 100_000  # values after following aliases; 100 GPU pools are about 1,500
MAX_DEPTH = 64
MAX_EXPANDED = (
    4 * MAX_BYTES
)  # characters of keys and scalars after following aliases; without aliases, at most the file's
# "Environment names ... may only contain alphanumeric characters, hyphens, underscores, and periods"
# (pulumi.com/docs/esc/environments/); an import names [org/][project/]env, at a version or tag (@3, @stable).
ESC_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}(/[A-Za-z0-9._-]{1,100}){0,2}(@[A-Za-z0-9._-]{1,100})?", re.ASCII)
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MAP, _SEQ, _MERGE = "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:merge"
_BOOLEANS = ("true", "false", "yes", "no", "on", "off", "y", "n")
# Scalars a stack file can hold: text, numbers, switches, null, and the text of a timestamp. Another
# tag (`!!binary aGk=`) means a value that YAML readers decode differently (PyYAML to bytes, Pulumi's
# Go reader to the decoded text), so it is refused rather than read as its text.
_SCALAR_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "timestamp"))
# Integers YAML 1.1 reads in a form YAML 1.2 does not: 0-prefixed octal (010 is 8), 0b binary,
# `_` separators, base 60 (1:30 is 90). (0x hex without `_` is read alike by both.)
_AMBIGUOUS_INT = re.compile(
    r"^[-+]?(0[0-9_]+|0b[01_]+|0x[0-9a-fA-F]*_[0-9a-fA-F_]*|[0-9][0-9_]*(:[0-5]?[0-9])+|[0-9]+_[0-9_]*)$"
)


def _int_form(text: str) -> str:
    body = text.lstrip("+-")
    if ":" in body:
        return "base 60"
    if body.startswith("0b"):
        return "binary"
    if body.startswith("0x"):
        return "hexadecimal with _ separators"
    if body.startswith("0") and len(body) > 1:
        return "octal"
    return "digits with _ separators"


@dataclass
class StackFile:
    """What a stack file says, and where. `problems` are the file's own mistakes (duplicate or
    unknown keys); a file that cannot be read at all raises `StackFileError` instead."""

    path: Path
    config: dict[str, Any] = field(default_factory=dict)  # full key -> value; secrets as their placeholder
    secret_keys: set[str] = field(default_factory=set)  # full keys holding an encrypted value (Pulumi's secret keys)
    secrets: dict[str, str] = field(default_factory=dict)  # where each encrypted value is (key_of) -> its placeholder
    environments: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    lines: dict[tuple, int] = field(default_factory=dict)  # ("config", key, ...) -> line
    unquoted: dict[tuple, str] = field(default_factory=dict)  # same locs: text YAML read as a number/boolean
    defaults: dict[str, tuple[Path, int]] = field(default_factory=dict)  # full key -> where Pulumi.yaml sets it

    def line_of(self, loc: tuple[str | int, ...]) -> int:
        """The line of the setting at `loc` (a config loc), or of what holds it."""
        for n in range(len(loc), -1, -1):
            found = self.lines.get(("config", *loc[:n]))
            if found:
                return found
        return 1

    def report(self, problems: list[Problem]) -> list[str]:
        """One `file:line key: message` line per problem, in file order, with hints: the
        quoting a number needs to stay text, the ESC import a required key may come from."""
        lines = []
        for order, p in enumerate(problems):
            line = p.line or self.line_of(p.loc)
            message = p.message
            raw = self.unquoted.get(("config", *p.loc))
            if raw is not None and message.startswith("must be a string"):
                read_as = "boolean" if raw.lower() in _BOOLEANS else "number"
                message += f' (YAML reads the unquoted {raw} as a {read_as}: quote it, "{raw}")'
            if " (if you wrote " in message and ("config", *p.loc) in self.lines:  # we know what was written
                message = message[: message.index(" (if you wrote ")]
                # quoting helps only where YAML's number is not the text written (1.30 read as 1.3);
                # text ("13.5") or a number read as written (13.5) is the version asked for: no hint
                if raw is not None and str(yaml.safe_load(raw)) != raw:
                    message += f' (YAML reads the unquoted {raw} as a number: quote it, "{raw}")'
            if self.environments and message == "is required":
                message += (
                    f" (if ESC environment {', '.join(self.environments)} sets it, the offline plan cannot "
                    "see it: set it in the stack file)"
                )
            default = self.defaults.get(str(p.loc[0])) if p.loc and p.line is None else None
            if default is not None and p.loc[0] not in self.config:  # the value is Pulumi.yaml's: say so, there
                message += " (Pulumi.yaml's default: this stack file does not set it)"
                lines.append((line, order, f"{shown(default[0])}:{default[1]} {p.key}: {message}"))
                continue
            lines.append((line, order, f"{shown(self.path)}:{line} {p.key}: {message}"))
        return [text for _, _, text in sorted(lines)]

    def notes(self) -> list[str]:
        """What the offline plan cannot know about this stack."""
        notes = [f"{key} is encrypted (secure:): unknown offline, shown as [secret]" for key in sorted(self.secrets)]
        if self.environments:
            notes.append(
                f"imports Pulumi ESC environment(s) {', '.join(self.environments)}: the config they set is unknown "
                "offline"
            )
        return notes


class StackFileError(Exception):
    """The file is not a stack file at all (not YAML, not a map, too big)."""

    def __init__(self, path: Path, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}")
        self.path, self.line, self.message = path, line, message


class _TooBig(Exception):
    pass


class _Malformed(Exception):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line, self.message = line, message


def read(path: Path) -> StackFile:
    """Read `path` as a stack file. Raises StackFileError when it cannot be one."""
    stack = StackFile(path)
    document = _document(path, stack, "a map with a config: section", follow=False)
    _sections(stack, document)
    return stack


def read_project(path: Path, lines: dict[tuple, int] | None = None) -> dict[str, Any]:
    """Read `path` as the project file (Pulumi.yaml) with a stack file's bounds: a map whose
    `name` is the config namespace the program reads (infra/core/names.py NAMESPACE: Pulumi
    namespaces the keys Pulumi.yaml declares with it) and whose `config:`, if any, is a map.
    A link to a Pulumi.yaml is fine (a project may share one). Raises StackFileError; `lines`, if
    given, gets the line of each value (("config", KEY, "default") -> line)."""
    project = StackFile(path)
    document = _document(path, project, "a map naming the project (name: higgsfield)", follow=True)
    if lines is not None:
        lines.update(project.lines)
    if project.problems:
        first = project.problems[0]
        raise StackFileError(path, first.line or 1, f"{first.key}: {first.message}")
    name, config = document.get("name"), document.get("config")
    if name != NAMESPACE:
        raise StackFileError(
            path,
            project.lines.get(("name",), 1),
            f"name: is {'missing' if name is None else repr(name)}, but the program reads its settings as "
            f"{NAMESPACE}:* (Pulumi names the keys Pulumi.yaml declares after the project): keep name: {NAMESPACE}",
        )
    where = document.get("stackConfigDir")
    if not isinstance(where, str) or PurePosixPath(where) != PurePosixPath("stacks"):
        # "StackConfigDir indicates where to store the Pulumi.<stack-name>.yaml files, combined with the
        # folder Pulumi.yaml is in" (pulumi/pulumi:sdk/go/common/workspace/project.go, type Project)
        raise StackFileError(
            path,
            project.lines.get(("stackConfigDir",), 1),
            f"stackConfigDir: is {'missing' if where is None else repr(where)[:60]}, but these tools read the stack "
            "files in stacks/: Pulumi would deploy other files than the ones planned and checked; keep "
            "stackConfigDir: stacks",
        )
    if config is not None and not isinstance(config, dict):
        raise StackFileError(
            path,
            project.lines.get(("config",), 1),
            f"config: must be a map of declared settings, got {_kind_of(config)}",
        )
    return document


def _document(path: Path, stack: StackFile, what: str, follow: bool) -> dict:
    """The map a stack or project file holds, its keys' lines and its problems kept in `stack`."""
    data = _regular_file_bytes(path, follow)
    if len(data) > MAX_BYTES:
        raise StackFileError(path, 1, f"is more than {MAX_BYTES:,} bytes; a stack file is a few KiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise StackFileError(path, line, f"is not UTF-8 text, so not {what}") from None
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise StackFileError(path, mark.line + 1 if mark else 1, _yaml_message(exc, text)) from None
    except yaml.YAMLError as exc:  # reader errors (control characters) carry a position only
        position = getattr(exc, "position", 0) or 0
        raise StackFileError(
            path, text[:position].count("\n") + 1, f"is not YAML: {' '.join(str(exc).split())}"
        ) from None
    finally:
        loader.dispose()
    if root is None:
        raise StackFileError(path, 1, f"is empty; it should be {what}")
    if not isinstance(root, yaml.MappingNode) or root.tag != _MAP:
        raise StackFileError(path, root.start_mark.line + 1, f"is {_kind(root)}, not {what}")
    reader = _Reader(_Loader(""), stack)
    try:
        document = reader.value(root, ())
    except _TooBig as exc:
        raise StackFileError(path, 1, str(exc)) from None
    except _Malformed as exc:
        raise StackFileError(path, exc.line, exc.message) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise StackFileError(path, mark.line + 1 if mark else 1, _yaml_message(exc)) from None
    return document


def _regular_file_bytes(path: Path, follow: bool = False) -> bytes:
    """At most MAX_BYTES + 1 bytes of `path`, refused unless it is a regular file (checked on the
    path, without following a link unless `follow`, and on what was opened)."""
    try:
        status = path.stat() if follow else path.lstat()
        if stat.S_ISLNK(status.st_mode):
            raise StackFileError(
                path, 1, "is a symbolic link: a stack file is a regular file in stacks/ (copy it there)"
            )
        if not stat.S_ISREG(status.st_mode):
            raise StackFileError(path, 1, f"is {_file_kind(status.st_mode)}, not a stack file (a regular file)")
        nofollow = 0 if follow else getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(path, os.O_RDONLY | nofollow | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise StackFileError(path, 1, "is not a regular file, so not a stack file")
            return file.read(MAX_BYTES + 1)
    except OSError as exc:
        raise StackFileError(path, 1, f"cannot be read ({exc.strerror or type(exc).__name__})") from None


def _file_kind(mode: int) -> str:
    for test, what in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
    ):
        if test(mode):
            return what
    return "not a regular file"


def _sections(stack: StackFile, document: dict) -> None:
    for key in document:
        if key not in STACK_FILE_KEYS:
            close = difflib.get_close_matches(str(key), STACK_FILE_KEYS, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else ""
            stack.problems.append(
                Problem(
                    (str(key),),
                    f"is not a stack-file section (sections: {', '.join(STACK_FILE_KEYS)}){hint}",
                    stack.lines.get((key,), 1),
                )
            )
    config = document.get("config")
    if "config" not in document:
        raise StackFileError(stack.path, 1, "has no config: section (the stack's settings, KEY: value)")
    if not isinstance(config, dict):
        raise StackFileError(
            stack.path,
            stack.lines[("config",)],
            f"config: must be a map of KEY: value settings, got {_kind_of(config)}",
        )
    stack.config = config
    environments = document.get("environment")
    names = environments.get("imports") if isinstance(environments, dict) else environments
    for i, name in enumerate(names if isinstance(names, list) else []):
        if isinstance(name, str) and name and not ESC_NAME.fullmatch(name):  # echoed in notes: never raw
            loc: tuple[str | int, ...] = (
                ("environment", "imports", i) if isinstance(environments, dict) else ("environment", i)
            )
            stack.problems.append(
                Problem(
                    loc,
                    f"{name[:60]!r} is not a Pulumi ESC environment name ([org/][project/]env[@version], each part "
                    "letters, digits, - _ .)",
                    stack.lines.get(loc, stack.lines.get(("environment",), 1)),
                )
            )
    if environments is not None:
        if isinstance(environments, dict):  # an inline definition; its imports, if any, by name
            imports = environments.get("imports")
            environments = [e for e in imports if isinstance(e, str)] if isinstance(imports, list) else []
            stack.environments = environments or ["(inline definition)"]
        elif isinstance(environments, list) and environments and all(isinstance(e, str) and e for e in environments):
            stack.environments = environments
        else:
            stack.problems.append(
                Problem(
                    ("environment",),
                    "must be a list of Pulumi ESC environment names (project/env) or an environment definition",
                    stack.lines[("environment",)],
                )
            )
    for key in ("secretsprovider", "encryptedkey", "encryptionsalt"):
        if key in document and not isinstance(document[key], str):
            stack.problems.append(
                Problem((key,), f"must be text (Pulumi writes it), got {_kind_of(document[key])}", stack.lines[(key,)])
            )


class _Reader:
    """Nodes to plain values, counting every value it makes (aliases included)."""

    def __init__(self, loader: Any, stack: StackFile) -> None:
        self.loader, self.stack, self.count, self.characters = loader, stack, 0, 0

    def value(self, node: yaml.Node, loc: tuple) -> Any:
        self.count += 1
        if self.count > MAX_VALUES:
            raise _TooBig(
                f"expands to more than {MAX_VALUES:,} values (YAML aliases repeated within each other?); a stack "
                "file has a few thousand"
            )
        if isinstance(node, yaml.ScalarNode):
            self.characters += len(node.value)
            if self.characters > MAX_EXPANDED:
                raise _TooBig(
                    f"expands to more than {MAX_EXPANDED:,} characters (a long value repeated through YAML aliases?); "
                    "a stack file is a few KiB"
                )
        if len(loc) > MAX_DEPTH:
            raise _TooBig(f"nests deeper than {MAX_DEPTH} levels; a stack file nests four or five")
        self.stack.lines.setdefault(loc, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            return self.mapping(node, loc)
        if isinstance(node, yaml.SequenceNode):
            if node.tag != _SEQ:
                self.unsupported(node, loc)
            return [self.value(item, (*loc, i)) for i, item in enumerate(node.value)]
        if node.tag not in _SCALAR_TAGS:
            self.unsupported(node, loc)
        try:
            value = self.loader.construct_object(node)
        except (ValueError, OverflowError):  # a timestamp with month 13, an integer of 5,000 digits
            return node.value  # the text, as Pulumi passes it; the setting's type says what is wrong
        if not isinstance(value, (str, int, float, bool, type(None))):
            return node.value  # timestamps and the like: the text, as Pulumi passes it
        if is_secret(value):  # plaintext spelled like an encrypted value's stand-in would be taken for one
            self.stack.problems.append(
                Problem(
                    loc[1:] if loc[:1] == ("config",) else loc,
                    f"is plaintext that reads like the offline stand-in of an encrypted value "
                    f"({UNKNOWN_SECRET[:8]}...): "
                    "the offline checks would skip it; write the value itself, or encrypt it with "
                    "`pulumi config set --secret`",
                    node.start_mark.line + 1,
                )
            )
        if not node.style and not isinstance(value, str) and value is not None:  # plain (unquoted)
            self.stack.unquoted[loc] = node.value
            self.read_differently(node, value, loc)
        return value

    def read_differently(self, node: yaml.ScalarNode, value: Any, loc: tuple) -> None:
        """A plain scalar that YAML 1.1 (PyYAML, this reader) and YAML 1.2 (Pulumi's Go reader,
        which decodes `yes` as the text "yes" and 0o10, not 010, as octal) read differently: the
        writer's meaning is unknown, so it is refused with the spelling that means one thing.
        YAML 1.1's forms: https://yaml.org/type/bool.html (y|yes|on|off|...), https://yaml.org/type/int.html
        (0-prefixed octal, 0b binary, `_` separators, base-60 `1:30`); YAML 1.2.2 core schema
        (yaml.org/spec/1.2.2, 10.3.2): only true/false, 0o octal, no separators, no base 60."""
        text, where = node.value, loc[1:] if loc[:1] == ("config",) else loc
        if isinstance(value, bool) and text.lower() not in ("true", "false"):
            message = (
                f"the unquoted {text} is true/false only in YAML 1.1 (Pulumi reads the text {text!r}): write "
                f'{"true" if value else "false"} for a switch, or quote it, "{text}", for text'
            )
        elif isinstance(value, int) and not isinstance(value, bool) and _AMBIGUOUS_INT.match(text):
            message = (
                f"YAML 1.1 reads the unquoted {text} as the number {value} ({_int_form(text)}), YAML 1.2 differently: "
                f'write the number plainly ({value}), or quote it, "{text}", for text'
            )
        elif isinstance(value, float) and ("_" in text or ":" in text):
            message = (
                f"YAML 1.1 reads the unquoted {text} as the number {value}: "
                f'write {value}, or quote it, "{text}", for text'
            )
        else:
            return
        self.stack.problems.append(Problem(where, message, node.start_mark.line + 1))

    def mapping(self, node: yaml.MappingNode, loc: tuple) -> Any:
        if node.tag != _MAP:
            self.unsupported(node, loc)
        if (
            len(node.value) == 1
            and isinstance(node.value[0][0], yaml.ScalarNode)
            and node.value[0][0].value == "secure"
            and loc[:1] == ("config",)
            and len(loc) > 1
        ):
            ciphertext = node.value[0][1]
            if (
                not isinstance(ciphertext, yaml.ScalarNode)
                or ciphertext.tag != "tag:yaml.org,2002:str"
                or not ciphertext.value
            ):
                self.stack.problems.append(
                    Problem(
                        loc[1:],
                        "secure: takes the ciphertext Pulumi wrote (`pulumi config set --secret`), as text",
                        node.start_mark.line + 1,
                    )
                )
            elif credential_in(ciphertext.value):  # typed in by hand: a ciphertext never reads like one
                self.stack.problems.append(
                    Problem(
                        loc[1:],
                        f"secure: holds {credential_in(ciphertext.value)} in plaintext, not a ciphertext: "
                        f"`pulumi config set --secret {loc[1]} ...` writes the ciphertext (and rotate it: the "
                        "plaintext is in the file's history)",
                        node.start_mark.line + 1,
                    )
                )
            placeholder = secret_placeholder(ciphertext.value if isinstance(ciphertext, yaml.ScalarNode) else "")
            self.stack.secret_keys.add(str(loc[1]))
            self.stack.secrets[key_of(loc[1:])] = placeholder
            return placeholder
        merged: dict[str, Any] = {}
        own: dict[str, Any] = {}
        first_line: dict[str, int] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == _MERGE:
                for source in value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]:
                    found = self.value(source, loc)
                    if not isinstance(found, dict):
                        self.stack.problems.append(
                            Problem(loc[1:] or loc, "a YAML merge (<<) takes a map or a list of maps", line)
                        )
                        continue
                    for k, v in found.items():
                        merged.setdefault(k, v)
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                self.stack.problems.append(Problem((*loc[1:], "?"), f"a key must be text, got {_kind(key_node)}", line))
                continue
            key = key_node.value
            self.characters += len(key)
            if key in own and not loc:  # a second config: (or other section) would silently replace the first
                raise _Malformed(
                    line,
                    f"{key}: is a section written twice (first at line {first_line[key]}): "
                    "YAML would keep only the last one",
                )
            if key in own:
                where = (*loc, key)
                self.stack.problems.append(
                    Problem(
                        where[1:] if where[:1] == ("config",) else where,
                        f"is set twice (first at line {first_line[key]}); YAML would keep one of them silently: "
                        "remove one",
                        line,
                    )
                )
            first_line.setdefault(key, line)
            self.stack.lines[(*loc, key)] = line
            own[key] = self.value(value_node, (*loc, key))
        return {**merged, **own}

    def unsupported(self, node: yaml.Node, loc: tuple) -> None:
        raise yaml.constructor.ConstructorError(
            None, None, f"the tag {node.tag} is not plain YAML a stack file can hold", node.start_mark
        )


def _yaml_message(exc: yaml.MarkedYAMLError, text: str = "") -> str:
    problem = exc.problem or exc.context or "is not valid YAML"
    mark, lines = exc.problem_mark, text.splitlines()
    if mark is not None and mark.line < len(lines) and "\t" in lines[mark.line][: mark.column + 1]:
        return f"YAML syntax: {problem}: a tab (YAML indents with spaces, never tabs)"
    context = f" ({exc.context})" if exc.context and exc.problem else ""
    return f"YAML syntax: {problem}{context}"


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    if isinstance(node, yaml.ScalarNode):
        return f"the text {node.value[:40]!r}" if node.value else "empty"
    return "a map"


def _kind_of(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a map"
    return f"{value!r}"


def shown(path: Path) -> str:
    """`path` relative to the working directory when it is below it (as a user typed it)."""
    try:  # the folder resolved, not the file: a link is named as the link, never as its target
        return str((path.parent.resolve() / path.name).relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)
