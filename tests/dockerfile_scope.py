"""Reads a Dockerfile the way BuildKit does and finds every variable used where it is not declared.

The instructions come from BuildKit's own parser (the `dockerfile` package wraps
moby/buildkit:frontend/dockerfile/parser); the scope rules are BuildKit's, as its reference states them
(moby/buildkit:frontend/dockerfile/docs/reference.md, sections ARG, "Scope", "Using ARG variables",
"Predefined ARGs", "Automatic platform ARGs in the global scope", ENV, "Environment replacement"):

- an ARG before the first FROM is global: usable in FROM lines only, unless a stage declares it again
  (`ARG NAME`, which takes the global default);
- an ARG inside a stage is in scope from its line to the end of that stage, and in no other stage;
- an ENV is in scope from its line to the end of the stage, and in every stage built FROM that stage
  (ENV is part of the image's configuration; ARG is not);
- the platform ARGs (TARGETARCH, BUILDPLATFORM, ...) are set in the global scope: usable in FROM, and
  inside a stage only after `ARG TARGETARCH`; the proxy ARGs (HTTP_PROXY, ...) reach RUN without one;
- Dockerfile instructions (FROM, COPY, ENV, WORKDIR, ...) substitute variables themselves; RUN does not:
  its shell reads the ARGs and ENVs of the stage as environment variables, so a RUN that uses an ARG its
  stage does not declare gets an empty string (`xgboost==${XGBOOST_VERSION}` becomes `xgboost==`).

BuildKit's own lint (`docker build --check`, rule UndefinedVar) looks at the instructions it expands,
not inside RUN; this check does both. What a base image's configuration sets is not in the Dockerfile:
the caller names it (`base_env`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import dockerfile

# moby/buildkit:frontend/dockerfile/docs/reference.md ("Automatic platform ARGs in the global scope").
PLATFORM_ARGS = frozenset(
    {
        "TARGETPLATFORM",
        "TARGETOS",
        "TARGETARCH",
        "TARGETVARIANT",
        "BUILDPLATFORM",
        "BUILDOS",
        "BUILDARCH",
        "BUILDVARIANT",
    }
)
# The same reference, "Predefined ARGs": passed to RUN without an ARG instruction.
PROXY_ARGS = frozenset(
    {
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "FTP_PROXY",
        "ftp_proxy",
        "NO_PROXY",
        "no_proxy",
        "ALL_PROXY",
        "all_proxy",
    }
)
# What a RUN's shell has without any declaration: the runtime sets PATH, HOSTNAME and HOME for every
# container (PATH from the image, or the default), and the shell its own variables.
SHELL_VARIABLES = frozenset(
    {
        "PATH",
        "HOME",
        "HOSTNAME",
        "PWD",
        "OLDPWD",
        "IFS",
        "RANDOM",
        "LINENO",
        "SHLVL",
        "BASH",
        "UID",
    }
)
# Instructions whose arguments BuildKit substitutes (reference.md, "Environment replacement").
EXPANDED = frozenset(
    {
        "ADD",
        "COPY",
        "ENV",
        "EXPOSE",
        "FROM",
        "LABEL",
        "STOPSIGNAL",
        "USER",
        "VOLUME",
        "WORKDIR",
        "ONBUILD",
    }
)

_VARIABLE = re.compile(r"\\\$|\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(:?[-+?][^}]*)?\}|([A-Za-z_][A-Za-z0-9_]*))")
_ASSIGNED = re.compile(r"(?:^|[\s;&|(`])(?:export\s+|local\s+|declare\s+(?:-\w+\s+)*)?([A-Za-z_][A-Za-z0-9_]*)\+?=")
_LOOP_OR_READ = re.compile(
    r"\b(?:for|select)\s+([A-Za-z_][A-Za-z0-9_]*)\s+in\b|\bread\s+(?:-\w+\s+)*([A-Za-z_][A-Za-z0-9_]*)"
)


@dataclass(frozen=True)
class Finding:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


@dataclass
class Stage:
    index: int
    name: str | None
    args: dict[str, str | None] = field(default_factory=dict)  # in scope now, with defaults
    env: set[str] = field(default_factory=set)  # ENV of this stage and its parents
    base_env: frozenset[str] = frozenset()  # what the base image's config sets


def _unquoted_for_shell(command: str) -> str:
    """The command with single-quoted text removed (the shell expands nothing inside it)."""
    out, quote, i = [], None, 0
    while i < len(command):
        c = command[i]
        if quote is None and c == "\\" and i + 1 < len(command):
            out.append(command[i : i + 2])
            i += 2
            continue
        if c == "'" and quote is None:
            quote = "'"
        elif c == "'" and quote == "'":
            quote = None
        elif c == '"' and quote is None:
            quote = '"'
        elif c == '"' and quote == '"':
            quote = None
        elif quote != "'":
            out.append(c)
        i += 1
    return "".join(out)


def variables_used(text: str) -> list[str]:
    """The variables `text` reads without a default (`${NAME:-x}` and `${NAME+x}` need no declaration)."""
    used = []
    for m in _VARIABLE.finditer(text):
        name = m.group(1) or m.group(3)
        operator = m.group(2) or ""
        if name and not (operator.startswith((":-", "-", ":+", "+"))):
            used.append(name)
    return used


def shell_variables_used(command: str) -> list[str]:
    """The variables a RUN's shell reads from its environment: used, and not assigned by the command itself."""
    text = _unquoted_for_shell(command)
    assigned = {m.group(1) for m in _ASSIGNED.finditer(text)}
    assigned |= {a or b for a, b in _LOOP_OR_READ.findall(text)}
    return [name for name in variables_used(text) if name not in assigned]


def _arg_declarations(values: tuple[str, ...]) -> list[tuple[str, str | None]]:
    found = []
    for value in values:
        name, sep, default = value.partition("=")
        found.append((name, default if sep else None))
    return found


def _stage_flag(flags: tuple[str, ...], name: str) -> str | None:
    for flag in flags:
        if flag.startswith(f"--{name}="):
            return flag.split("=", 1)[1]
    return None


def check_text(text: str, base_env: dict[str, frozenset[str]] | None = None) -> list[Finding]:
    """Every variable `text` uses outside its scope, every FROM or COPY --from naming no stage that exists.

    `base_env`: for an image a FROM names (after substitution), the variables its configuration sets
    (e.g. {"pytorch/pytorch:...": {"PATH", "LD_LIBRARY_PATH"}}); any other image is assumed to set PATH only.
    """
    base_env = base_env or {}
    findings: list[Finding] = []
    global_args: dict[str, str | None] = {}
    stages: list[Stage] = []
    by_name: dict[str, Stage] = {}

    def substitute(value: str, scope: dict[str, str | None]) -> str:
        def value_of(m: re.Match[str]) -> str:
            return "$" if m.group(0) == "\\$" else scope.get(m.group(1) or m.group(3) or "") or ""

        return _VARIABLE.sub(value_of, value)

    for command in dockerfile.parse_string(text):
        line, cmd = command.start_line, command.cmd.upper()
        if cmd == "FROM":
            words = [w for w in command.value]
            image = words[0]
            for name in variables_used(image) + [v for f in command.flags for v in variables_used(f)]:
                if name not in global_args and name not in PLATFORM_ARGS:
                    findings.append(
                        Finding(line, f"FROM uses ${{{name}}}, which no ARG before the first FROM declares")
                    )
            resolved = substitute(image, {**{a: None for a in PLATFORM_ARGS}, **global_args})
            stage_name = words[2].lower() if len(words) >= 3 and words[1].upper() == "AS" else None
            stage = Stage(len(stages), stage_name)
            parent = by_name.get(resolved.lower())
            if parent is not None:
                stage.env = set(parent.env)
                stage.base_env = parent.base_env
            else:
                stage.base_env = frozenset({"PATH"}) | base_env.get(resolved, frozenset())
            stages.append(stage)
            if stage_name:
                by_name[stage_name] = stage
            continue
        if not stages:
            if cmd == "ARG":
                global_args.update(_arg_declarations(command.value))
            else:
                findings.append(Finding(line, f"{cmd} before the first FROM (only ARG may come before it)"))
            continue
        stage = stages[-1]
        where = f"stage {stage.name or stage.index}"
        if cmd == "ARG":
            for name, default in _arg_declarations(command.value):
                if default is None and name in global_args:
                    default = global_args[name]
                stage.args[name] = default
            continue
        in_scope = set(stage.args) | stage.env | stage.base_env
        if cmd in EXPANDED:
            texts = list(command.value) + [f for f in command.flags]
            for name in (n for t in texts for n in variables_used(t)):
                if name not in in_scope:
                    findings.append(
                        Finding(
                            line,
                            f"{cmd} uses ${{{name}}}, which is not declared in {where}"
                            + _why(name, global_args, stages[:-1]),
                        )
                    )
        elif cmd == "RUN" and not command.json:
            shell = set(in_scope) | PROXY_ARGS | SHELL_VARIABLES
            for name in dict.fromkeys(shell_variables_used(" ".join(command.value))):
                if name not in shell:
                    findings.append(
                        Finding(
                            line,
                            f"RUN reads ${{{name}}}, which is not declared in {where}"
                            + _why(name, global_args, stages[:-1]),
                        )
                    )
        if cmd == "ENV":
            values = command.value
            stage.env.update(values[i] for i in range(0, len(values), 2))
        if cmd in ("COPY", "ADD"):
            flag = _stage_flag(command.flags, "from")
            if flag is not None:
                source = substitute(flag, stage.args)
                known = (
                    source.isdigit()
                    and int(source) < stage.index
                    or source.lower() in {s.name for s in stages[:-1] if s.name}
                )
                looks_like_image = any(c in source for c in "/:@.")
                if not known and not looks_like_image:
                    findings.append(Finding(line, f"{cmd} --from={source} names no earlier stage"))
    return findings


def _why(name: str, global_args: dict[str, str | None], earlier: list[Stage]) -> str:
    if name in global_args:
        return f" (a global ARG is usable in FROM only: declare `ARG {name}` in this stage)"
    if any(name in s.args for s in earlier):
        return f" (an ARG ends with its stage: declare `ARG {name}` in this stage too)"
    if name in PLATFORM_ARGS:
        return f" (a platform ARG reaches a stage only through `ARG {name}`)"
    return ""


def check(path: Path, base_env: dict[str, frozenset[str]] | None = None) -> list[Finding]:
    return check_text(path.read_text(), base_env)


@dataclass(frozen=True)
class Instruction:
    stage: int
    line: int
    cmd: str
    json: bool
    value: tuple[str, ...]
    flags: tuple[str, ...]


def _defaults(text: str, scope: dict[str, str | None]) -> str:
    return _VARIABLE.sub(lambda m: scope.get(m.group(1) or m.group(3) or "") or m.group(0), text)


def expanded(text: str) -> list[Instruction]:
    """Every instruction after the first FROM, with the ARGs in scope there replaced by their defaults
    (what a build without --build-arg uses); a variable out of scope is left as written."""
    found: list[Instruction] = []
    global_args: dict[str, str | None] = {}
    scope: dict[str, str | None] | None = None
    stage = -1
    for command in dockerfile.parse_string(text):
        cmd = command.cmd.upper()
        if cmd == "FROM":
            scope, stage = {}, stage + 1
        if cmd == "ARG":
            for name, default in _arg_declarations(command.value):
                if scope is None:
                    global_args[name] = default
                else:
                    scope[name] = global_args.get(name) if default is None else default
        if scope is None:
            continue
        found.append(
            Instruction(
                stage,
                command.start_line,
                cmd,
                command.json,
                tuple(_defaults(v, scope) for v in command.value),
                tuple(_defaults(f, scope) for f in command.flags),
            )
        )
    return found


def expanded_runs(text: str) -> list[tuple[int, str]]:
    """(line, command) of every shell-form RUN, with the ARGs in scope there replaced by their defaults."""
    return [(i.line, " ".join(i.value)) for i in expanded(text) if i.cmd == "RUN" and not i.json]
