"""Reading a stack: credentials refused, values decoded, `pulumi.Config` read (the only place)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, get_args, get_origin

import pulumi
from pydantic import (
    BaseModel,
    ValidationError,
)

from infra.config.base import NAMESPACE
from infra.config.errors import (
    ConfigError,
    Problem,
    _parse_where,
    _show,
    _suggest,
    key_of,
)
from infra.config.gpu_pools import Catalog
from infra.config.stack import _HIDDEN, StackConfig, eks_regions
from infra.core.stack_values import UNKNOWN_SECRET, as_written, credential_in, is_secret, secret_leaves, without_secrets  # noqa: F401 - UNKNOWN_SECRET: re-exported


def _expected(ctx: Mapping[str, Any]) -> str:
    """pydantic's "'a', 'b' or 'c'" as `a, b, c`."""
    text = str(ctx.get("expected", ""))
    quoted = re.findall(r"'([^']*)'", text)
    return ", ".join(quoted) if quoted else text.replace(" or ", ", ")


_MESSAGES: dict[str, Callable[[Any, Mapping[str, Any]], str]] = {
    "missing": lambda v, c: "is required",
    "literal_error": lambda v, c: f"{_show(v)} is not one of: {_expected(c)}",
    "int_type": lambda v, c: f"must be an integer, got {_show(v)}",
    "int_parsing": lambda v, c: f"must be an integer, got {_show(v)}",
    "int_from_float": lambda v, c: f"must be an integer, got {_show(v)}",
    "bool_type": lambda v, c: f"must be true or false, got {_show(v)}",
    "bool_parsing": lambda v, c: f"must be true or false, got {_show(v)}",
    "float_type": lambda v, c: f"must be a number, got {_show(v)}",
    "float_parsing": lambda v, c: f"must be a number, got {_show(v)}",
    "string_type": lambda v, c: f"must be a string, got {_show(v)}",
    "string_too_short": lambda v, c: "must not be empty",
    "string_too_long": lambda v, c: (
        f"has at most {c.get('max_length')} characters, got {len(v) if isinstance(v, str) else '?'}"
    ),
    "too_short": lambda v, c: (
        "must not be empty"
        if isinstance(v, str) and not v
        else f"needs at least {c.get('min_length')} {'characters' if isinstance(v, str) else 'entries'}, got "
        f"{c.get('actual_length')}"
    ),
    "too_long": lambda v, c: (
        f"{'has' if isinstance(v, str) else 'takes'} at most {c.get('max_length')} "
        f"{'characters' if isinstance(v, str) else 'entries'}, got {c.get('actual_length')}"
    ),
    "greater_than_equal": lambda v, c: f"must be at least {c.get('ge')}, got {_show(v)}",
    "greater_than": lambda v, c: f"must be more than {c.get('gt')}, got {_show(v)}",
    "less_than_equal": lambda v, c: f"must be at most {c.get('le')}, got {_show(v)}",
    "tuple_type": lambda v, c: f"must be a list, got {_show(v)}",
    "list_type": lambda v, c: f"must be a list, got {_show(v)}",
    "dict_type": lambda v, c: f"must be a map of names to values, got {_show(v)}",
    "model_type": lambda v, c: f"must be an object (a map of settings), got {_show(v)}",
    "model_attributes_type": lambda v, c: f"must be an object (a map of settings), got {_show(v)}",
    "value_error": lambda v, c: str(c.get("error", "")),
}


def _model_at(loc: tuple[str | int, ...], root: type[BaseModel] | None = None) -> type[BaseModel] | None:
    """The model class (of the stack settings, or of `root`) that holds the setting at `loc` (for "did you mean")."""
    model: Any = root or StackConfig
    for part in loc:
        if isinstance(part, int):
            continue
        fields = {f.alias or n: f for n, f in model.model_fields.items()}
        if part not in fields:
            return None
        model = _model_in(fields[part].annotation)
        if model is None:
            return None
    return model


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def did_you_mean(loc: tuple[str | int, ...], root: type[BaseModel]) -> str:
    """`; did you mean KEY?` for an unknown setting at `loc` of `root`'s settings, or nothing."""
    parent = _model_at(loc[:-1], root)
    allowed = sorted(f.alias or n for n, f in parent.model_fields.items() if n not in _HIDDEN) if parent else []
    guess = _suggest(str(loc[-1]), allowed)
    return f"; did you mean {guess}?" if guess else ""


def _unknown(loc: tuple[str | int, ...]) -> str:
    name = str(loc[-1])
    parent = _model_at(loc[:-1])
    allowed = sorted(f.alias or n for n, f in parent.model_fields.items() if n not in _HIDDEN) if parent else []
    guess = _suggest(name, allowed)
    hint = f"; did you mean {guess}?" if guess else ""
    if len(loc) > 1:
        return f"unknown setting{hint} (allowed: {', '.join(allowed)})"
    namespace = name.split(":", 1)[0] if ":" in name else None
    if namespace is None:
        return (
            "config keys carry a namespace "
            f"(NAMESPACE:key){hint or f'; this program reads {NAMESPACE}:* and aws:region'}"
        )
    if namespace == "aws":
        return (
            "not an aws setting this program reads (it reads aws:region, and the provider, encrypted, "
            f"{', '.join(SECRET_ONLY_KEYS)}; set AWS_PROFILE in your shell){hint}"
        )
    if namespace != NAMESPACE:
        return f"unknown config namespace {namespace!r} (this program reads {NAMESPACE}:* and aws:region){hint}"
    return f"unknown setting{hint}"


def problems_of(error: ValidationError) -> list[Problem]:
    """pydantic's errors as our problems: full keys, our wording, one per wrong setting."""
    found = []
    for e in error.errors(include_url=False):
        loc, ctx = tuple(e["loc"]), e.get("ctx") or {}
        if e["type"] == "higgsfield":
            found += [Problem(loc + _parse_where(where), message) for where, message in ctx["problems"]]
        elif e["type"] == "extra_forbidden":
            found.append(Problem(loc, _unknown(loc)))
        else:
            message = _MESSAGES.get(e["type"], lambda v, c: e["msg"])(e.get("input"), ctx)  # noqa: B023 - called at once
            found.append(Problem(loc, message))
    return found


# --- credentials --------------------------------------------------------------------------

# AWS provider credentials Pulumi hands the provider from stack config: accepted only encrypted
# (`pulumi config set --secret`); they never reach the model. (aws:profile is refused like any
# other aws: key: it names credentials on one machine, and CI deploys with OIDC roles.)
SECRET_ONLY_KEYS = ("aws:accessKey", "aws:secretKey", "aws:token")
PROVIDER_KEYS = SECRET_ONLY_KEYS
# Pulumi's own settings in a stack file, read by the engine and not by the program: which packages
# get no default provider, a list of package names or "*" (www.pulumi.com/docs/iac/concepts/
# resources/providers/, "Disabling default providers": `pulumi config set --path
# 'pulumi:disable-default-providers[0]' aws`). Checked for shape, then left to the engine.
PULUMI_KEYS = ("pulumi:disable-default-providers",)
_PACKAGE = re.compile(r"\*|[a-z0-9][a-z0-9-]{0,63}", re.ASCII)


def _pulumi_setting_problems(config: Mapping[str, Any]) -> list[Problem]:
    found = []
    value = config.get("pulumi:disable-default-providers")
    if "pulumi:disable-default-providers" in config and not is_secret(value):
        value = _scalar(value)
        if not isinstance(value, list) or not all(isinstance(v, str) and _PACKAGE.fullmatch(v) for v in value):
            found.append(
                Problem(
                    ("pulumi:disable-default-providers",),
                    'must be a list of package names (aws, kubernetes, ...) or ["*"] for all',
                )
            )
    return found


_SECRET_NAME = re.compile(r"(secret|passw(or)?d|token|credential|private.?key|api.?key|access.?key)", re.I)
# Each pattern is searched in time linear in the value's length: no lookahead or nested repetition
# that rescans the rest of the value from every position (lookaheads searched at every position
# are quadratic: tens of seconds on a 1 MB value). A secret access key is recognised only as a whole value
# (`_aws_secret_key`), the others anywhere in one.
_SECRET_KEY_CHARS = re.compile(r"[A-Za-z0-9/+]{40}")


def _aws_secret_key(value: str) -> bool:
    """A whole value of 40 base64 characters with a digit, an upper- and a lowercase letter."""
    return (
        len(value) == 40
        and _SECRET_KEY_CHARS.fullmatch(value) is not None
        and any(c.isdigit() for c in value)
        and any(c.isupper() for c in value)
        and any(c.islower() for c in value)
    )


def _looks_like_a_credential(value: str) -> str | None:
    """What credential `value` looks like, if any (linear time in its length)."""
    if _aws_secret_key(value):
        return "an AWS secret access key"
    return credential_in(value)


def _secret_hint(key: str) -> str:
    return (
        f"store it encrypted: `pulumi config set --secret {key} ...` (and rotate it: the plaintext is in "
        "the file's history); for AWS, prefer AWS_PROFILE or the CI's OIDC role over keys in config"
    )


def credential_problems(
    config: Mapping[str, Any], secret_keys: frozenset[str] | set[str] = frozenset()
) -> list[Problem]:
    """Plaintext credentials among the stack's settings: a credential key (aws:secretKey, anything
    named like a password, token or secret) or a value that looks like one (an AWS key, a private
    key, a GitHub or Slack token). Encrypted values (`secret_keys`) are fine."""
    found: list[Problem] = []

    def walk(loc: tuple[str | int, ...], value: Any) -> None:
        if isinstance(value, Mapping):
            for name, item in value.items():
                if is_secret(item):
                    continue
                if _SECRET_NAME.search(str(name)) and isinstance(item, (str, int, float)) and str(item):
                    found.append(
                        Problem((*loc, str(name)), f"looks like a credential in plaintext; {_secret_hint(key_of(loc))}")
                    )
                else:
                    walk((*loc, str(name)), item)
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                walk((*loc, i), item)
        elif isinstance(value, str):
            what = _looks_like_a_credential(value)
            if what:
                found.append(Problem(loc, f"looks like {what} in plaintext; {_secret_hint(key_of(loc[:1]))}"))

    for key, value in config.items():
        if is_secret(value) or (
            key in secret_keys and not secret_leaves(value)
        ):  # decrypted: Pulumi knows it was encrypted
            continue
        name = key.partition(":")[2] or key
        if key in SECRET_ONLY_KEYS or _SECRET_NAME.search(name):
            found.append(Problem((key,), f"is a credential in plaintext; {_secret_hint(key)}"))
        else:
            walk((key,), value)
    return found


# --- parsing ------------------------------------------------------------------------------

MAX_DEPTH = 16  # lists and maps within a setting; the models nest at most four (gpuPools[0].capacity.start)


def _depth(value: Any) -> int:
    """How deeply lists and maps nest in `value` (iteratively: no recursion limit to hit)."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, Mapping):
            todo += [(v, level + 1) for v in item.values()]
        elif isinstance(item, (list, tuple)):
            todo += [(v, level + 1) for v in item]
        else:
            deepest = max(deepest, level)
            continue
        deepest = max(deepest, level + 1)
        if deepest > MAX_DEPTH:
            return deepest
    return deepest


def validate(
    stack: str,
    config: Mapping[str, Any],
    catalog: Catalog | None = None,
    secret_keys: frozenset[str] | set[str] = frozenset(),
) -> StackConfig:
    """Build the typed config from a stack's settings keyed by full key (`aws:region`,
    `higgsfield:gpuPools`, ...). Raises one ConfigError listing every problem: plaintext
    credentials, unknown keys (each with its likely meaning, the rest checked as if meant, so
    a typo is reported as the typo and not as what its absence breaks), and every wrong value.
    `secret_keys` were encrypted in the stack file (wholly or in part). Offline, an encrypted value
    is a placeholder (`infra.core.stack_values.secret_placeholder`): a whole setting's is not checked
    and the default stands in; one inside a setting is left out and the rest checked."""
    deep = [key for key, value in config.items() if _depth(value) > MAX_DEPTH]
    if deep:  # before anything recurses into them
        problems = [
            Problem((key,), f"nests deeper than {MAX_DEPTH} levels; a setting nests three or four") for key in deep
        ]
        raise ConfigError(problems[0].key, problems[0].message, problems)
    problems = credential_problems(config, secret_keys) + _pulumi_setting_problems(config)
    config = {k: v for k, v in config.items() if k not in PULUMI_KEYS}
    unknown = {k for k, v in config.items() if is_secret(v) and k not in PROVIDER_KEYS}
    fields = {f.alias: f for f in StackConfig.model_fields.values()}
    for key in sorted(unknown):
        if key in fields and fields[key].is_required():
            problems.append(
                Problem(
                    (key,),
                    "is encrypted (secure:) and required: the offline plan cannot decrypt it; keep it in plaintext, "
                    "it is not a credential",
                )
            )
    config = {k: v for k, v in config.items() if k not in PROVIDER_KEYS and k not in unknown}
    # An encrypted value inside a setting hides that value only: the setting is checked with it
    # left out (its plaintext neighbours, its shape), and a problem its absence causes says so.
    hidden: dict[tuple, str] = {}
    moved: dict[tuple, tuple] = {}
    for key, value in list(config.items()):
        leaves = secret_leaves(value, (key,))
        if leaves:
            hidden.update(leaves)
            config[key], more = without_secrets(value, (key,))
            moved.update(more)
    region = config.get("aws:region")
    context = {"catalog": catalog, "region": region if isinstance(region, str) and region in eks_regions() else None}
    config = {k: _scalar(v) if k in _non_string_keys() else v for k, v in config.items()}
    meant, renamed = _as_meant({**config, "stack": stack}, StackConfig, ())
    problems += [Problem(as_written(written, moved), _unknown(written)) for written in renamed.values()]
    try:
        result = StackConfig.model_validate(meant, context=context, by_alias=True, by_name=False)
    except ValidationError as exc:
        for p in problems_of(exc):
            if p.key in unknown and p.message == "is required":
                continue
            loc = as_written(_as_written(p.loc, renamed), moved)
            problems.append(Problem(loc, p.message + _left_out(loc, hidden), p.line))
    else:
        if not problems:
            return result
    raise ConfigError(problems[0].key, problems[0].message, problems)


def _left_out(loc: tuple, hidden: dict[tuple, str]) -> str:
    """Why a problem at `loc` may come from an encrypted value left out of the offline check."""
    inside = sorted((h for h in hidden if h[: len(loc)] == loc), key=len)
    if not inside:
        return ""
    return (
        f" (with the encrypted value at {key_of(inside[0])} left out: the offline plan cannot decrypt it; "
        "keep in plaintext what is not a credential)"
    )


def _as_meant(
    data: Any, model: type[BaseModel] | None, loc: tuple[str | int, ...], by_name: bool = False
) -> tuple[Any, dict[tuple, tuple]]:
    """`data` with every unknown key renamed to the setting it most likely means, when that one
    is not set (`higgsfield:gpuPool` -> `higgsfield:gpuPools`, `maxSzie` -> `maxSize`), and the
    renames (meant loc -> written loc). `by_name`: attribute names are known keys too (a job
    file's Python API writes `class_`, `gpu_type`); a stack file's keys are the aliases only."""
    if model is None or not isinstance(data, dict):
        return data, {}
    fields = {f.alias or n: f for n, f in model.model_fields.items()}
    allowed = sorted(a for a, f in fields.items() if a not in _HIDDEN)
    if by_name:
        fields |= model.model_fields
    out: dict[Any, Any] = {}
    renamed: dict[tuple, tuple] = {}
    for key, value in data.items():
        target = key
        if key not in fields and isinstance(key, str):
            guess = _suggest(key, allowed)
            if guess and guess not in data and guess not in out:
                target = guess
                renamed[(*loc, guess)] = (*loc, key)
        out[target] = value
    for key, value in list(out.items()):
        if key not in fields:
            continue
        inner = _model_in(fields[key].annotation)
        if isinstance(value, dict):
            out[key], more = _as_meant(value, inner, (*loc, key), by_name)
            renamed.update(more)
        elif isinstance(value, list) and inner is not None:
            items = []
            for i, item in enumerate(value):
                fixed, more = _as_meant(item, inner, (*loc, key, i), by_name)
                items.append(fixed)
                renamed.update(more)
            out[key] = items
    return out, renamed


def _as_written(loc: tuple[str | int, ...], renamed: dict[tuple, tuple]) -> tuple[str | int, ...]:
    """A loc in the meant data as the stack file spells it."""
    for n in range(len(loc), 0, -1):
        if loc[:n] in renamed:
            return renamed[loc[:n]] + loc[n:]
    return loc


@cache
def _non_string_keys() -> frozenset[str]:
    """Top-level keys whose value is a number or a boolean: Pulumi hands every top-level value
    over as a string ("3", "true"), so these are decoded before validation."""

    def scalar(annotation: Any) -> bool:
        if annotation in (int, float, bool):
            return True
        return get_origin(annotation) is not tuple and any(
            scalar(a) for a in get_args(annotation) if a is not type(None)
        )

    return frozenset(f.alias for f in StackConfig.model_fields.values() if f.alias and scalar(f.annotation))


def _scalar(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def parse(stack: str, region: Any, values: Mapping[str, Any], catalog: Catalog | None = None) -> StackConfig:
    """Build the typed config from raw values (`values` keyed without the namespace)."""
    return validate(stack, {"aws:region": region, **{f"{NAMESPACE}:{k}": v for k, v in values.items()}}, catalog)


def _decode(raw: str) -> Any:
    """Stack values arrive as strings; objects and lists as JSON text."""
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    return value if isinstance(value, (dict, list)) else raw


def load(from_environment: bool = True) -> StackConfig:
    """Read this stack's config through `pulumi.Config` and validate it. The offline plan reads
    the stack file only (`from_environment=False`): a PULUMI_CONFIG left in the shell is not the
    stack's, and neither are its keys nor PULUMI_CONFIG_SECRET_KEYS."""
    # The SDK has no "list keys" call: the engine hands config over as set_all_config or PULUMI_CONFIG.
    every_key = {
        *pulumi.runtime.config.CONFIG.get(),
        *(pulumi.runtime.config.get_config_env() if from_environment else ()),
    }
    values = {}
    for key in sorted(every_key):
        namespace, _, name = key.partition(":")
        raw = (
            pulumi.Config(namespace).get(name) if name else pulumi.runtime.config.get_config(key)
        )  # unnamespaced: reported
        if raw is not None:
            values[key] = _decode(raw)
    secret = {k for k in values if pulumi.runtime.config.is_config_secret(k)} | set(
        pulumi.runtime.config.get_config_secret_keys_env() if from_environment else ()
    )
    from infra.core import catalog

    return validate(pulumi.get_stack(), values, catalog=catalog, secret_keys=frozenset(secret))
