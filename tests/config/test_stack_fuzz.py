"""Fuzzing the stack-file reader and the config model with Hypothesis: random and
adversarial stack files -- the dev stack with values replaced by huge, deep, mistyped or
YAML-ambiguous ones, keys added, and plain garbage -- all go through `higgsfield bootstrap STACK`
(the reader and the full validation, without evaluating the program). Every one exits 2 with
`file:line key: message` lines (or `file:line: message` for a file that is no stack file), never a
traceback and never the catch-all "error: ... rerun with --debug", each in under a second.

Bounded in time: a fixed number of examples, derandomized (the same examples on every run, so a
failure reproduces), with Hypothesis's per-example deadline of one second. A release runs more
(HIGGSFIELD_FUZZ_EXAMPLES, HIGGSFIELD_FUZZ_SEED=random; docs/what-check-and-diff-refuse.md).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra.cli.main import main
from tests.conftest import ROOT

DEV = yaml.safe_load((ROOT / "stacks" / "Pulumi.dev.yaml").read_text())
FILE = "stacks/Pulumi.fuzz.yaml"
LINE = re.compile(rf"^{re.escape(FILE)}:\d+(: | .+?: )\S")  # file:line: message, or file:line KEY: message
# The suite runs a few seconds of it; a release runs it longer, with new examples each time
# (docs/what-check-and-diff-refuse.md, "Fuzzing before a release"): HIGGSFIELD_FUZZ_EXAMPLES=N,
# and HIGGSFIELD_FUZZ_SEED=random for examples not derandomized.
EXAMPLES = int(os.environ.get("HIGGSFIELD_FUZZ_EXAMPLES", "30"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=1000,
    derandomize=os.environ.get("HIGGSFIELD_FUZZ_SEED") != "random",
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)


def _paths(value, prefix=()):
    """Every path to a value in the dev stack's config (maps and lists, leaves included)."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


PATHS = [p for p in _paths(DEV["config"]) if p]
# Plain scalars YAML 1.1 and 1.2 read differently, or that are no plain value at all.
RAW = [
    "010",
    "0o17",
    "yes",
    "No",
    "off",
    "1:30",
    "0x1F",
    "1_000",
    ".inf",
    "-.nan",
    "~",
    "2027-13-45T00:00:00Z",
    "9" * 5000,
    "!!binary aGk=",
    "!!python/object:os.system x",
    "*nope",
    "&a x",
    "'unterminated",
    "{",
    "[1, [2, [3",
    "- a",
    "? x",
    "@at",
    "%TAG",
]

leaf = st.one_of(
    st.text(max_size=40),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.sampled_from(
        [
            "x" * 100_000,
            "A" * 40,
            "AKIA" + "A" * 16,
            "ab/" * 30_000,
            "é" * 2000,
            "\u202e\u0000bad",
            "arn:aws:sts::111122223333:assumed-role/r/s",
        ]
    ),
    st.sampled_from([f"__RAW{i}__" for i in range(len(RAW))]),
)
value = st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(min_size=1, max_size=12), inner, max_size=4)
    ),
    max_leaves=30,
)


def _nest(n: int, as_list: bool):
    out = 1
    for _ in range(n):
        out = [out] if as_list else {"k": out}
    return out


deep = st.tuples(st.integers(min_value=1, max_value=200), st.booleans()).map(lambda t: _nest(*t))


def _set(config, path, new):
    target = config
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = new


@st.composite
def stack_files(draw) -> str:
    config = yaml.safe_load(yaml.safe_dump(DEV["config"]))
    for path in draw(st.lists(st.sampled_from(PATHS), max_size=4)):
        try:
            _set(config, path, draw(st.one_of(value, deep)))
        except (KeyError, IndexError, TypeError):
            pass  # an earlier change removed what the path led through
    # one change that no setting accepts: a map where a scalar is, or a key no model has
    kind = draw(st.sampled_from(["map-for-scalar", "unknown-key"]))
    if kind == "unknown-key":
        config[draw(st.sampled_from(["higgsfield:fuzz", "aws:fuzz", "fuzz", "higgsfield:gpuPoolz"]))] = draw(value)
    else:
        scalars = [p for p in _paths(config) if p and not isinstance(_get(config, p), (dict, list))]
        if not scalars:
            config["higgsfield:environment"] = {"x": 1}
        else:
            _set(config, draw(st.sampled_from(scalars)), {"unexpected": draw(leaf)})
    text = yaml.safe_dump({"config": config}, allow_unicode=True, width=1 << 30)
    for i, raw in enumerate(RAW):
        text = text.replace(f"__RAW{i}__", raw).replace(f"'__RAW{i}__'", raw)
    return text


def _get(config, path):
    for part in path:
        config = config[part]
    return config


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    (root / "stacks").mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", root / "Pulumi.yaml")
    before = os.getcwd()
    os.chdir(root)
    # warm up: the first run imports the SDKs and loads the instance-type catalog (seconds, once)
    (root / FILE).write_text(yaml.safe_dump({"config": {**DEV["config"], "higgsfield:fuzz": 1}}))
    main(["bootstrap", "fuzz"])
    yield root
    os.chdir(before)


def _refused_cleanly(project: Path, text: str | bytes, capsys) -> None:
    path = project / FILE
    path.write_bytes(text) if isinstance(text, bytes) else path.write_text(
        text, encoding="utf-8", errors="surrogatepass"
    )
    capsys.readouterr()
    start = time.process_time()  # this process's CPU time: the machine's load is not the reader's
    rc = main(["bootstrap", "fuzz"])
    took = time.process_time() - start
    err = capsys.readouterr().err
    assert rc == 2, (rc, err[:2000])
    assert "Traceback" not in err and "rerun with --debug" not in err, err[:2000]
    lines = err.strip().splitlines()
    assert lines and all(LINE.match(line) for line in lines), lines[:5]
    assert len(err) < 100_000, len(err)  # no value echoed whole
    assert took < 1.0, took


@FUZZ
@given(text=stack_files())
def test_fuzzed_stack_files_exit_2_naming_a_key(project, capsys, text):
    _refused_cleanly(project, text, capsys)


@FUZZ
@given(data=st.one_of(st.binary(max_size=2000), st.text(max_size=2000).map(lambda t: "config:\n" + t)))
def test_random_bytes_exit_2_naming_the_file_and_line(project, capsys, data):
    if isinstance(data, str) and data.startswith("config:\n") and not data[len("config:\n") :].strip():
        data += "  higgsfield:fuzz: 1\n"  # an empty config: section would be missing settings, also refused, named
    _refused_cleanly(project, data, capsys)
