"""`higgsfield schema [--write]`: the stack-file JSON Schema, the settings reference and the CLI
reference, generated from the code (the config models in `infra/config/`, the command line in
`infra/cli/main.py`), so none can drift.

    schemas/stack.schema.json     editors complete and check stack files with it: the first line
                                  of each stack file is `# yaml-language-server: $schema=../schemas/stack.schema.json`
    docs/reference/settings.md    the table between the config-table markers
    docs/reference/cli.md         every command's --help

Field descriptions are the docstrings under the fields (read here from the source, so the
program pays nothing for them at run time) or a `derived("...")` field's description.
"""

from __future__ import annotations

import argparse
import ast
import functools
import inspect
import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema

from infra import config

SCHEMA_PATH = Path("schemas") / "stack.schema.json"
SETTINGS_PATH = Path("docs") / "reference" / "settings.md"
CLI_PATH = Path("docs") / "reference" / "cli.md"
JOB_SCHEMA_PATH = Path("schemas") / "job.schema.json"
JOB_REFERENCE_PATH = Path("docs") / "reference" / "job-file.md"
TABLE_START = "<!-- config-table:start: generated from infra/config/ by `higgsfield schema --write`; do not edit -->"
TABLE_END = "<!-- config-table:end -->"
REGENERATE = "python -m infra.cli schema --write"
SCHEMA_ID = "https://github.com/higgsfield/higgsfield/schemas/stack.schema.json"
JOB_SCHEMA_ID = "https://github.com/higgsfield/higgsfield/schemas/job.schema.json"
# Provider credentials Pulumi reads from stack config: accepted only encrypted (`pulumi config set --secret`).
SECRET_ONLY_KEYS = config.SECRET_ONLY_KEYS
DERIVED = "default derived from other settings"


def _models() -> list[type[BaseModel]]:
    """Every settings model: the stack file's and the job file's."""
    return [
        v
        for v in vars(config).values()
        if isinstance(v, type) and issubclass(v, config.Setting) and v is not config.Setting
    ]


def field_docs(model: type[BaseModel]) -> dict[str, str]:
    """Attribute name -> the docstring written under it in the class body."""
    return dict(_field_docs(model))


@functools.cache
def _field_docs(model: type[BaseModel]) -> dict[str, str]:
    """field_docs, read once a process for each model: inspect.getsource parses the model's whole module to find the
    class (about 5 ms a model, two dozen a schema), and a loaded class's source does not change."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(model)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for field, doc in zip(body, body[1:], strict=False):
        if (
            isinstance(field, ast.AnnAssign)
            and isinstance(field.target, ast.Name)
            and isinstance(doc, ast.Expr)
            and isinstance(doc.value, ast.Constant)
            and isinstance(doc.value.value, str)
        ):
            docs[field.target.id] = " ".join(doc.value.value.split())
    return docs


class _Schema(GenerateJsonSchema):
    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def _describe(schema: dict, model: type[BaseModel]) -> None:
    docs = field_docs(model)
    if model.__doc__:
        schema["description"] = " ".join(inspect.cleandoc(model.__doc__).split("\n\n")[0].split())
    schema.pop("title", None)
    for name, info in model.model_fields.items():
        prop = schema.get("properties", {}).get(info.alias or name)
        if prop is None:
            continue
        if name in docs:
            prop["description"] = docs[name]
        if info.default is None and prop.get("default", 0) is None and not _nullable(prop):
            prop.pop("default")  # a derived default: the description says how it is chosen
            prop["$comment"] = DERIVED


def _nullable(prop: dict) -> bool:
    return any(option.get("type") == "null" for option in prop.get("anyOf", []))


def config_schema() -> dict:
    """The JSON Schema of the `config:` mapping of a stack file."""
    schema = config.StackConfig.model_json_schema(by_alias=True, mode="validation", schema_generator=_Schema)
    by_name = {m.__name__: m for m in _models()}
    for name, sub in schema.get("$defs", {}).items():
        if name in by_name:
            _describe(sub, by_name[name])
    _describe(schema, config.StackConfig)
    schema["properties"].pop("stack", None)
    schema["required"] = [k for k in schema.get("required", []) if k != "stack"]
    for key in SECRET_ONLY_KEYS:
        schema["properties"][key] = {
            "$ref": "#/$defs/Secure",
            "description": "AWS provider credential: only encrypted (pulumi config set --secret); prefer AWS_PROFILE "
            "or OIDC",
        }
    schema.setdefault("$defs", {})["Secure"] = {
        "type": "object",
        "description": "A value Pulumi encrypted (pulumi config set --secret KEY VALUE)",
        "properties": {"secure": {"type": "string", "minLength": 1}},
        "required": ["secure"],
        "additionalProperties": False,
    }
    return schema


def stack_file_schema() -> dict:
    """The JSON Schema of a whole stacks/Pulumi.<stack>.yaml file."""
    inner = config_schema()
    defs = inner.pop("$defs", {})
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "Higgsfield stack file (stacks/Pulumi.<stack>.yaml)",
        "description": f"Generated from infra/config/ by `{REGENERATE}`; do not edit.",
        "type": "object",
        "properties": {
            "config": inner,
            "environment": {
                "description": "Pulumi ESC environments to import config from (values unknown to the offline plan)",
                "type": "array",
                "items": {"type": "string", "minLength": 1},
            },
            "secretsprovider": {
                "type": "string",
                "description": "Set by Pulumi: how this stack's secrets are encrypted",
            },
            "encryptedkey": {
                "type": "string",
                "description": "Set by Pulumi: the stack's data key, encrypted by the secrets provider",
            },
            "encryptionsalt": {
                "type": "string",
                "description": "Set by Pulumi: the passphrase secrets provider's salt",
            },
        },
        "required": ["config"],
        "additionalProperties": False,
        "$defs": defs,
    }


def schema_text() -> str:
    return json.dumps(stack_file_schema(), indent=2) + "\n"


# --- the settings table -------------------------------------------------------------------------


def _type_of(prop: dict, defs: dict) -> str:
    if "$ref" in prop:
        return "object" if "enum" not in defs[prop["$ref"].split("/")[-1]] else "string"
    if "enum" in prop:
        return " \\| ".join(f"`{v}`" for v in prop["enum"])
    if "const" in prop:
        return f"`{prop['const']}`"
    if "anyOf" in prop:
        return " or ".join(_type_of(o, defs) for o in prop["anyOf"] if o.get("type") != "null")
    kind = prop.get("type", "any")
    if kind == "array":
        item = prop.get("items", {})
        return f"list of {_type_of(item, defs)}" if "$ref" not in item else "list of objects"
    if kind == "object":
        return "map"
    return str(kind)


def _limits(prop: dict) -> str:
    parts = []
    if "minimum" in prop or "exclusiveMinimum" in prop or "maximum" in prop:
        low = (
            f">= {prop['minimum']:,}"
            if "minimum" in prop
            else (f"> {prop['exclusiveMinimum']}" if "exclusiveMinimum" in prop else "")
        )
        high = f"<= {prop['maximum']:,}" if "maximum" in prop else ""
        parts.append(", ".join(p for p in (low, high) if p))
    if "minItems" in prop:
        parts.append(f"at least {prop['minItems']}")
    return "; ".join(parts)


def table_rows(schema: dict | None = None) -> list[tuple[str, str, str, str]]:
    """(key, type, default, meaning) for every setting (of the stack file, or of `schema`), nested
    ones as `key.sub` / `key[].sub`."""
    schema = schema or config_schema()
    defs = schema["$defs"]
    rows: list[tuple[str, str, str, str]] = []

    def walk(props: dict, required: list[str], prefix: str) -> None:
        for key, prop in props.items():
            full = f"{prefix}{key}"
            target = prop.get("items", prop) if prop.get("type") == "array" else prop
            options = [o for o in target.get("anyOf", [target]) if o.get("type") != "null"]
            ref = next((o["$ref"] for o in options if "$ref" in o), None)
            if ref == "#/$defs/Secure":
                rows.append((full, "secret (`secure:`)", "unset", prop.get("description", "")))
                continue
            if key in required:
                default = "required"
            elif ref or "default" not in prop:
                default = "computed" if prop.get("$comment") == DERIVED else "unset" if not ref else "see below"
            else:
                default = f"`{json.dumps(prop['default'])}`"
            limits = _limits(target)
            meaning = " ".join(
                p
                for p in (
                    prop.get("description") or (defs[ref.split("/")[-1]].get("description", "") if ref else ""),
                    f"({limits})" if limits else "",
                )
                if p
            )
            rows.append((full, _type_of(prop, defs), default, meaning))
            if ref:
                sub = defs[ref.split("/")[-1]]
                if sub.get("type") == "object" and "properties" in sub:
                    walk(
                        sub["properties"],
                        sub.get("required", []),
                        f"{full}[]." if prop.get("type") == "array" else f"{full}.",
                    )

    walk(schema["properties"], schema.get("required", []), "")
    return rows


def settings_table(schema: dict | None = None) -> str:
    lines = [TABLE_START, "", "| key | type | default | meaning |", "|---|---|---|---|"]
    for key, kind, default, meaning in table_rows(schema):
        escaped = meaning.replace("|", "\\|")
        lines.append(f"| `{key}` | {kind} | {default} | {escaped} |")
    lines += ["", TABLE_END]
    return "\n".join(lines)


def with_table(page: str) -> str:
    start, end = page.index(TABLE_START), page.index(TABLE_END) + len(TABLE_END)
    return page[:start] + settings_table() + page[end:]


# --- the job file -------------------------------------------------------------------------------


def job_schema() -> dict:
    """The JSON Schema of a team's job file (infra/config/job.py)."""
    schema = config.JobFile.model_json_schema(by_alias=True, mode="validation", schema_generator=_Schema)
    by_name = {m.__name__: m for m in _models()}
    for name, sub in schema.get("$defs", {}).items():
        if name in by_name:
            _describe(sub, by_name[name])
    _describe(schema, config.JobFile)
    resources = schema["$defs"]["JobResources"]["properties"]
    listed = resources["gpuType"]  # one name or a list of names (JobResources._one_type)
    resources["gpuType"] = {
        "anyOf": [listed["items"], {k: v for k, v in listed.items() if k not in ("default", "description")}],
        "default": listed["default"],
        "description": listed["description"],
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": JOB_SCHEMA_ID,
        "title": "Higgsfield job file (higgsfield jobs render STACK -f JOB.yaml)",
        **{k: v for k, v in schema.items() if k != "description"},
        "description": f"{schema.get('description', '')} Generated from infra/config/job.py by `{REGENERATE}`; "
        "do not edit.",
    }


def job_schema_text() -> str:
    return json.dumps(job_schema(), indent=2) + "\n"


def job_reference() -> str:
    """docs/reference/job-file.md: what a job file may say, generated from its model."""
    from infra.core.assets import shipped  # a wheel carries the example inside the package

    example = shipped("examples/llama-ft.job.yaml").read_text()
    body = "\n".join(line for line in example.splitlines() if not line.startswith("#"))
    return "\n".join(
        [
            "# Job file reference",
            "",
            f"Generated from `infra/config/job.py` by `{REGENERATE}`; do not edit. A team's job says what it needs;",
            "`higgsfield jobs render STACK -f JOB.yaml` places it on the stack's pools and applies every platform rule",
            "(docs/concepts/training-jobs.md), `higgsfield jobs submit STACK -f JOB.yaml` runs it. Editors check",
            "job files with `schemas/job.schema.json` (their first line:",
            "`# yaml-language-server: $schema=schemas/job.schema.json`).",
            "",
            "```yaml",
            body,
            "```",
            "",
            settings_table(job_schema()),
            "",
        ]
    )


# --- the CLI reference -------------------------------------------------------------------------


def cli_reference(parser: Callable[[], argparse.ArgumentParser]) -> str:
    """Every command's `--help` (of the command line `parser()` builds: infra/cli/main.py's, handed
    in so that this module need not import the command line), as argparse prints it at 100
    columns, under a heading each."""
    import os

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal's width: fixed, so the page is stable
    try:
        top = parser()
        sections = [("higgsfield", top)]
        for action in top._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, command in action.choices.items():
                    nested = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
                    if nested:
                        sections += [(f"higgsfield {name} {sub}", c) for sub, c in nested[0].choices.items()]
                    else:
                        sections.append((f"higgsfield {name}", command))
        parts = [
            f"# CLI reference\n\nGenerated from `infra/cli/main.py` by `{REGENERATE}`; do not edit. "
            "Exit status: 0 ok, 1 a check failed (or an unforeseen error), 2 the stack or the command line is wrong.\n"
        ]
        for title, command in sections:
            parts.append(f"## `{title}`\n\n```text\n{command.format_help().rstrip()}\n```\n")
        return "\n".join(parts)
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous


def stale(root: Path, parser: Callable[[], argparse.ArgumentParser]) -> list[str]:
    """The generated files under `root` that differ from what the code generates."""
    found = []
    schema = root / SCHEMA_PATH
    if not schema.is_file() or schema.read_text() != schema_text():
        found.append(str(SCHEMA_PATH))
    job = root / JOB_SCHEMA_PATH
    if not job.is_file() or job.read_text() != job_schema_text():
        found.append(str(JOB_SCHEMA_PATH))
    if not has_manual(root):  # a project of one's own: the schema its stack files name, no manual
        return found
    settings = root / SETTINGS_PATH
    page = settings.read_text()
    if TABLE_START not in page or TABLE_END not in page or with_table(page) != page:
        found.append(f"{SETTINGS_PATH} (settings table)")
    cli = root / CLI_PATH
    if not cli.is_file() or cli.read_text() != cli_reference(parser):
        found.append(str(CLI_PATH))
    reference = root / JOB_REFERENCE_PATH
    if not reference.is_file() or reference.read_text() != job_reference():
        found.append(str(JOB_REFERENCE_PATH))
    return found


def has_manual(root: Path) -> bool:
    """Whether `root` is a Higgsfield checkout, with the manual's reference pages (docs/reference/),
    rather than a project of one's own beside an installed package."""
    return (root / SETTINGS_PATH).is_file()


def write(root: Path, parser: Callable[[], argparse.ArgumentParser]) -> list[str]:
    """The JSON Schema the stack files name and, in a checkout, the reference pages generated from
    the code; the paths written."""
    from infra.offline.option_files import replace_file  # a link found there is replaced, never written through

    (root / SCHEMA_PATH).parent.mkdir(exist_ok=True)
    replace_file(root / SCHEMA_PATH, schema_text())
    replace_file(root / JOB_SCHEMA_PATH, job_schema_text())
    if not has_manual(root):
        return [str(SCHEMA_PATH), str(JOB_SCHEMA_PATH)]
    settings = root / SETTINGS_PATH
    replace_file(settings, with_table(settings.read_text()))
    replace_file(root / CLI_PATH, cli_reference(parser))
    replace_file(root / JOB_REFERENCE_PATH, job_reference())
    return [str(SCHEMA_PATH), str(JOB_SCHEMA_PATH), str(SETTINGS_PATH), str(CLI_PATH), str(JOB_REFERENCE_PATH)]
