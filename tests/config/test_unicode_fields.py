"""Other scripts' digits and letters in settings that AWS and Kubernetes read as ASCII only: an
Arabic-Indic '٣', a fullwidth '３' or a Devanagari '३' in a duration, an account id, an AMI release
or an ARN, a Cyrillic 'а' or a fullwidth 'ａ' in a name, are refused naming the key (Python's `\\d`
and `\\w` match them all, and the Cluster Autoscaler, EC2 and the API server do not). Checked as a
property over every string setting of every shipped stack: Hypothesis picks the setting, the
character replaced and the script it comes from. Free text that AWS takes in any script (tag
values, a reason) is the exception, and is accepted."""

from __future__ import annotations

import os
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra.config import ConfigError
from infra.config.loading import validate
from infra.core.stack_values import key_of
from tests.bundled_catalog import BundledCatalog
from tests.conftest import ROOT, STACKS

CATALOG = BundledCatalog()
CONFIGS = {stack: yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"] for stack in STACKS}
# Other scripts' digits, by value: Arabic-Indic, fullwidth, Devanagari (each a Unicode `\d`).
DIGITS = (0x0660, 0xFF10, 0x0966)
# Letters that look like or stand for ASCII ones: fullwidth, and Cyrillic/Greek look-alikes.
LOOKALIKES = {"a": "а", "c": "с", "e": "е", "o": "оο", "p": "р", "x": "х", "i": "і", "s": "ѕ"}
# Settings AWS takes in any script (tag values: letters and numbers of any script, the FSx
# TagValue pattern cited in infra/config/limits.py) or that are free text (a reason, a path in S3).
FREE_TEXT = ("higgsfield:tags.", ".reason", ".importPath", ".exportPath")


def leaves(config: dict) -> list[tuple[tuple, str]]:
    """(loc, value) of every string setting in a stack's config."""
    found, todo = [], [((k,), v) for k, v in config.items()]
    while todo:
        loc, value = todo.pop()
        if isinstance(value, str):
            found.append((loc, value))
        elif isinstance(value, dict):
            todo += [((*loc, k), v) for k, v in value.items()]
        elif isinstance(value, list):
            todo += [((*loc, i), v) for i, v in enumerate(value)]
    return sorted(found, key=lambda item: key_of(item[0]))


def substitute(value: str, kind: str, which: int, script: int) -> str | None:
    """`value` with its `which`-th ASCII digit (or letter) written in another script."""
    spots = [i for i, c in enumerate(value) if (c.isascii() and (c.isdigit() if kind == "digit" else c.isalpha()))]
    if not spots:
        return None
    at = spots[which % len(spots)]
    c = value[at]
    if kind == "digit":
        other = chr(DIGITS[script % len(DIGITS)] + int(c))
    else:
        choices = [
            chr(0xFF21 + ord(c.upper()) - ord("A")) if c.isupper() else chr(0xFF41 + ord(c) - ord("a")),
            *LOOKALIKES.get(c, ""),
        ]
        other = choices[script % len(choices)]
    return value[:at] + other + value[at + 1 :]


def _set(config: dict, loc: tuple, value: Any) -> dict:
    copy = yaml.safe_load(yaml.safe_dump(config))
    target = copy
    for part in loc[:-1]:
        target = target.setdefault(part, {}) if isinstance(target, dict) else target[part]
    target[loc[-1]] = value
    return copy


def rejects(stack: str, config: dict, loc: tuple, value: str) -> bool | str:
    """True when validating `config` with `value` at `loc` is refused naming that key; else what happened."""
    try:
        validate(stack, _set(config, loc, value), catalog=CATALOG)
    except ConfigError as exc:
        keys = [p.key for p in exc.problems]
        return (
            True
            if any(k == key_of(loc) or k.startswith(key_of(loc) + ".") for k in keys)
            else f"refused, naming {keys}"
        )
    return "accepted"


def _ascii_only(loc: tuple) -> bool:
    key = key_of(loc)
    return not any(key.startswith(f) or f in key for f in FREE_TEXT)


SETTINGS = [
    (stack, loc, value) for stack, config in CONFIGS.items() for loc, value in leaves(config) if _ascii_only(loc)
]
PROPERTY = settings(
    max_examples=int(os.environ.get("HIGGSFIELD_FUZZ_EXAMPLES", "60")),
    deadline=None,
    derandomize=os.environ.get("HIGGSFIELD_FUZZ_SEED") != "random",
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@PROPERTY
@given(
    setting=st.sampled_from(SETTINGS),
    kind=st.sampled_from(["digit", "letter"]),
    which=st.integers(0, 40),
    script=st.integers(0, 5),
)
def test_another_scripts_digit_or_letter_in_an_ascii_setting_is_refused_naming_the_key(setting, kind, which, script):
    stack, loc, value = setting
    changed = substitute(value, kind, which, script)
    if changed is None:
        return
    assert rejects(stack, CONFIGS[stack], loc, changed) is True, (key_of(loc), changed)


@pytest.mark.parametrize(
    ("loc", "value"),
    [
        (("higgsfield:gpuPools", 1, "capacity", "drainBefore"), "\u0661h"),  # Arabic-Indic 1
        (("higgsfield:delivery", "accountId"), "４４４４５５５５６６６６"),  # fullwidth
        (("higgsfield:admins", 0), "arn:aws:iam::४४४४५५५५६६६६:role/PlatformAdmin"),  # Devanagari
        (("higgsfield:addonVersions", "vpc-cni"), "v1.\u0662\u0660.4-eksbuild.1"),
    ],
)
def test_named_unicode_digits_are_refused(loc, value):
    assert rejects("prod", CONFIGS["prod"], loc, value) is True


@pytest.mark.parametrize("value", ["ｍｌ\u3000平台", "équipe\u00a0ML", "٣"])
def test_a_tag_value_in_any_script_aws_takes_is_accepted(value):
    validate("prod", _set(CONFIGS["prod"], ("higgsfield:tags", "team"), value), catalog=CATALOG)
