"""Shared fixtures: the recorded offline plan of every shipped stack, and stack variants.

Two things hold for the whole session:
- The clock is pinned (SESSION_NOW): what the program plans depends on the time (a Capacity Block
  pool is held, opened or drained by its window; a window in the past is refused), and the suite
  must say the same thing on any day, long after the shipped prod stack's block has ended.
- The program is evaluated once per input (Memo): evaluating a stack under mocks takes about a
  second, rendering an example job a tenth, and the suite asks for the same ones hundreds of times,
  through every command.
"""

from __future__ import annotations

import atexit
import copy
import functools
import gc
import hashlib
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import botocore.client
import botocore.handlers
import botocore.session
import pytest
import yaml
from _pytest.assertion import rewrite
from botocore import loaders
from botocore.hooks import HierarchicalEmitter

from components.registry import image_tag
from components.teams import rules_of
from components.tenancy import TeamRules
from infra.config import StackConfig
from infra.config import gpu_pools as pool_settings
from infra.offline import evaluate as offline
from infra.offline import jobs
from infra.offline.evaluate import Plan, load_stack, record, stack_names

ROOT = Path(__file__).resolve().parent.parent

# The collector runs after 50,000 allocations, not 700, from here on: while a process imports and collects every
# test module, each of its full collections walked every module and type imported so far (about 0.7 s of a
# worker's 4 s of collection). pytest_collection_finish then freezes what collection made.
gc.set_threshold(50_000, 20, 50)


@functools.cache
def torch_python() -> str | None:
    """A Python with PyTorch, for the tests that run the in-pod programs with real gloo ranks: this
    one, or HIGGSFIELD_TORCH_PYTHON (torch is not a dev dependency). Asked once per process."""
    candidate = os.environ.get("HIGGSFIELD_TORCH_PYTHON", sys.executable)
    found = subprocess.run([candidate, "-c", "import torch, numpy"], capture_output=True, check=False)
    return candidate if found.returncode == 0 else None


needs_torch = pytest.mark.skipif(
    torch_python() is None, reason="needs PyTorch (set HIGGSFIELD_TORCH_PYTHON to a Python that has it)"
)
STACKS = stack_names(ROOT)
_plans: dict[str, Plan] = {}

# moto's EC2 loads a few thousand public AMIs into each region's backend it creates, which is most
# of a second per test that starts a mock; nothing here asks EC2 for images (the EKS AMI comes from
# SSM), so it loads none (moto/ec2/models/amis.py _load_amis, settings.ec2_load_default_amis).
os.environ.setdefault("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")

# Each boto3.Session has its own botocore Loader, and each Loader parses the JSON models of the
# services its clients use again (EC2's alone is a few megabytes: about 0.15 s); tests that start a
# mock account make a session each, so the suite spent seconds re-reading the same package files.
# Every Loader with the same search paths shares one cache here: what it holds is a pure function
# of botocore's data files, which do not change during a run (botocore/loaders.py instance_cache).
_botocore_data: dict[tuple[str, ...], dict] = {}
_new_loader = loaders.Loader.__init__


def _loader_sharing_what_it_read(self: loaders.Loader, *args: Any, **kwargs: Any) -> None:
    _new_loader(self, *args, **kwargs)
    self._cache = _botocore_data.setdefault(tuple(self.search_paths), {})


loaders.Loader.__init__ = _loader_sharing_what_it_read  # type: ignore[method-assign]

# A botocore Session registers its 130-odd built-in handlers one by one, each event name matched against every
# alias (botocore/session.py _register_builtin_handlers, hooks.py EventAliaser): a Session took 7 ms, 1.3 ms so,
# and the suite makes some 330. Here a Session starts from a copy of the emitter the first one built for the same
# list of built-in handlers (moto appends its own when imported), as botocore copies an emitter for each client
# (HierarchicalEmitter.__copy__: the trie's structure copied, the handlers shared): the same handlers, in the same
# order, under the same names. A Session given event hooks of its own registers as botocore does.
_built_in_emitters: list[tuple[list, HierarchicalEmitter]] = []
_register_built_in = getattr(botocore.session.Session, "_register_builtin_handlers", None)


def _built_in_handlers_copied(self: botocore.session.Session, events: Any) -> None:
    emitter = getattr(self, "_original_handler", None)
    trie = getattr(getattr(emitter, "_handlers", None), "_root", None)
    if type(emitter) is not HierarchicalEmitter or not isinstance(trie, dict) or trie.get("children") != {}:
        return _register_built_in(self, events)  # event hooks of its own, or a botocore built otherwise
    if emitter._unique_id_handlers:
        return _register_built_in(self, events)
    handlers = botocore.handlers.BUILTIN_HANDLERS
    for listed, built in _built_in_emitters:
        if len(listed) == len(handlers) and all(a is b for a, b in zip(listed, handlers, strict=True)):
            emitter.__dict__.update(copy.copy(built).__dict__)
            emitter._lookup_cache = {}  # HierarchicalEmitter.__copy__ shares the original's
            return None
    _register_built_in(self, events)
    _built_in_emitters.append((list(handlers), copy.copy(emitter)))
    return None


if _register_built_in is not None:  # another botocore: slower, not wrong
    botocore.session.Session._register_builtin_handlers = _built_in_handlers_copied  # type: ignore[method-assign]

# A client's class has a method for each operation of its service, each made with its docstring's operation model
# (botocore/client.py ClientCreator._create_methods): an EC2 client took 15 ms, 8 ms so (S3 10 -> 7.5), and the
# suite makes some 570 clients. The methods depend only on the service model's operation names (each calls
# `_make_api_call` with its own), which come from the shared data files above; each class still gets a dict of its
# own, for the `creating-client-class` handlers to add to.
_client_methods: dict[tuple[str, str, tuple[str, ...]], dict[str, Any]] = {}
_create_methods = getattr(botocore.client.ClientCreator, "_create_methods", None)


def _methods_made_once(self: botocore.client.ClientCreator, service_model: Any) -> dict[str, Any]:
    key = (service_model.service_name, service_model.api_version, tuple(service_model.operation_names))
    if key not in _client_methods:
        _client_methods[key] = _create_methods(self, service_model)
    return dict(_client_methods[key])


if _create_methods is not None:
    botocore.client.ClientCreator._create_methods = _methods_made_once  # type: ignore[method-assign]

# Each xdist worker collects every test module, and pytest rewrites each one's asserts: about 4 s of a
# worker's 7 s of collection. pytest keeps a rewritten module as a pyc only where Python may write
# bytecode, and PYTHONDONTWRITEBYTECODE=1 (this machine, CI) forbids it, so every worker rewrote every
# module. Here the processes of one run share a folder of rewritten modules: the controller makes it
# (and removes it at the end: a fresh clone starts with none), rewrites the modules into it in the
# order the workers collect them while they start, and a worker that meets a module not yet there
# rewrites it and leaves it for the others. pytest reads a pyc only if it holds its source's hash
# (_pytest/assertion/rewrite.py _read_pyc), and writes one whole or not at all (_write_pyc: a
# process's own file, then os.replace). Nothing is written into the checkout.
# The process that makes the folder removes it when it exits (atexit): a run that stops at its arguments, or a script
# that imports these helpers, has no pytest_unconfigure.
if "HIGGSFIELD_REWRITTEN_TESTS" not in os.environ:  # the controller, a run without workers, or no pytest at all
    os.environ["HIGGSFIELD_REWRITTEN_TESTS"] = tempfile.mkdtemp(prefix="higgsfield-rewritten-")
    atexit.register(shutil.rmtree, os.environ["HIGGSFIELD_REWRITTEN_TESTS"], ignore_errors=True)
REWRITTEN = Path(os.environ["HIGGSFIELD_REWRITTEN_TESTS"])
_rewrite_test = getattr(rewrite, "_rewrite_test", None)


def _rewritten_pyc(source: Path) -> Path:
    return REWRITTEN / Path(*source.parts[1:-1]) / (source.name[:-3] + rewrite.PYC_TAIL)


def _rewrite_and_keep(source: Path, config: pytest.Config) -> tuple[bytes, Any]:
    source_hash, code = _rewrite_test(source, config)
    pyc = _rewritten_pyc(source)
    pyc.parent.mkdir(parents=True, exist_ok=True)
    rewrite._write_pyc(config.stash[rewrite.assertstate_key], code, source_hash, pyc)
    return source_hash, code


# pytest's own functions, private ones: with a pytest that lacks any of them, each worker rewrites for itself.
_SHARED_REWRITES = all(
    hasattr(rewrite, name) for name in ("get_cache_dir", "_rewrite_test", "_write_pyc", "PYC_TAIL", "assertstate_key")
)
if _SHARED_REWRITES:
    rewrite.get_cache_dir = lambda source: _rewritten_pyc(source).parent
    rewrite._rewrite_test = _rewrite_and_keep


_run_ended = threading.Event()


def _end_without_teardown() -> None:
    """An xdist worker's last act, once its results are sent and its session closed (atexit runs after the main
    thread and every other non-daemon thread have ended, and after the exit functions registered after this one):
    the process ends without the interpreter's teardown, which frees the SDKs' module graph and every object the
    tests kept one by one (about a second of CPU a worker, at the very end of the run). infra/cli/main.py run() ends
    the CLI the same way."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    os._exit(0)


def _rewrite_ahead_of_the_workers(config: pytest.Config) -> None:
    for arg in config.args:
        named = Path(config.invocation_params.dir, arg.split("::")[0])
        for source in sorted(named.rglob("*.py")) if named.is_dir() else [named]:
            if _run_ended.is_set():
                return
            if source.name.startswith("test_") or source.name == "conftest.py":
                try:
                    if not _rewritten_pyc(source).is_file():
                        _rewrite_and_keep(source, config)
                except Exception:  # noqa: BLE001  a module that does not parse: its worker reports it
                    continue


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker (not a process a test starts, which inherits its environment)
        atexit.register(_end_without_teardown)
    rewriting = config.getoption("assertmode") == "rewrite"
    if _SHARED_REWRITES and rewriting and not hasattr(config, "workerinput") and config.getoption("numprocesses", None):
        threading.Thread(target=_rewrite_ahead_of_the_workers, args=(config,), name="rewrite ahead").start()


def pytest_unconfigure(config: pytest.Config) -> None:
    _run_ended.set()
    for thread in threading.enumerate():
        if thread.name == "rewrite ahead":
            thread.join()


SESSION_NOW = datetime(2026, 12, 3, tzinfo=UTC)  # before prod's Capacity Block (2027-01-04 to 01-18)
pool_settings.now = lambda: SESSION_NOW


class Memo:
    """A pure function of the program, answered once per input. Every evaluation of the program
    goes through offline._record_in_fresh_context(stack, config, secret_keys), every example job
    through jobs.render(example, cfg, **options); what they return depends on those, on the image
    tag (a content hash of the project's images/training, components/registry.py) and on the clock,
    pinned above. Answers are kept under that key, in memory and in a folder the xdist workers
    share, and each caller gets its own copy. While a test has patched anything
    (monkeypatch.setattr/setitem, below), the code may not be what the key says: then it runs.
    An environment variable set (monkeypatch.setenv) is no such patch unless it is Pulumi's:
    neither the program nor a job render reads the environment (the config is passed in)."""

    patched = 0  # attributes and items patched by tests right now
    folder: Path | None = None

    def __init__(self, name: str, function: Callable[..., Any], key: Callable[..., Any]) -> None:
        self.name, self.function, self.key, self.memory = name, function, key, {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if Memo.patched:
            return self.function(*args, **kwargs)
        key = hashlib.sha256(
            json.dumps([self.name, self.key(*args, **kwargs), _image_tag()], sort_keys=True).encode()
        ).hexdigest()
        shared = Memo.folder / key if Memo.folder else None
        blob = self.memory.get(key) or (shared.read_bytes() if shared and shared.is_file() else None)
        if blob is None:
            blob = pickle.dumps(self.function(*args, **kwargs))
            if shared:
                partial = shared.with_suffix(f".{os.getpid()}")
                partial.write_bytes(blob)
                partial.replace(shared)  # whole or absent, for a worker reading it now
        self.memory[key] = blob
        return pickle.loads(blob)


def _image_tag() -> str:
    """image_tag(): a content hash of a few files (well under a millisecond), asked each time, so
    an uncommitted change of the image sources is seen too."""
    return image_tag()


offline._record_in_fresh_context = Memo(
    "plan",
    offline._record_in_fresh_context,
    lambda stack, config, secret_keys=None: [stack, config, sorted(secret_keys or [])],
)
jobs.render = Memo("render", jobs.render, lambda example, cfg, **options: [example, cfg.model_dump_json(), options])


@pytest.fixture(scope="session", autouse=True)
def _answers_shared_by_workers(tmp_path_factory, worker_id) -> None:
    """The xdist workers of one run share a folder (their base temp's parent); a run without
    workers keeps its own."""
    base = tmp_path_factory.getbasetemp()
    Memo.folder = (base.parent if worker_id != "master" else base) / "answers"
    Memo.folder.mkdir(exist_ok=True)


class _TrackedMonkeyPatch(pytest.MonkeyPatch):
    """pytest's monkeypatch, telling Memo while anything is patched."""

    def __init__(self) -> None:
        super().__init__()
        self.counted = 0

    def setattr(self, *args, **kwargs) -> None:
        super().setattr(*args, **kwargs)
        self.counted += 1
        Memo.patched += 1

    def setitem(self, dic, name, value) -> None:
        super().setitem(dic, name, value)
        if dic is os.environ and not str(name).startswith("PULUMI"):
            return  # setenv: the program reads no environment variable (load(from_environment=False))
        self.counted += 1
        Memo.patched += 1

    def undo(self) -> None:
        super().undo()
        Memo.patched -= self.counted
        self.counted = 0


@pytest.fixture
def monkeypatch():
    patches = _TrackedMonkeyPatch()
    yield patches
    patches.undo()


def manual_text() -> str:
    """What a user reads: the README and every page of docs/."""
    return "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))])


def plan_of(stack: str) -> Plan:
    """The recorded plan of a shipped stack (evaluated once per test session)."""
    if stack not in _plans:
        _plans[stack] = record(stack, root=ROOT)
    return _plans[stack]


def team_rules(stack: str, team: str) -> TeamRules:
    """The admission rules of shipped `stack`'s team `team`, as the program renders its policy (its priority classes
    and GPU pools' shares)."""
    cfg = config_of(stack)
    found = next(t for t in cfg.scheduler.teams if t.name == team)
    return rules_of(found, cfg.scheduler.priority_classes, pools=cfg.gpu_pools)


def with_a_karpenter_pool(root: Path, stack: str, as_stack: str | None = None) -> Plan:
    """The plan of shipped `stack` with its first GPU pool `provisioner: karpenter` (from zero), recorded from a copy
    of the project in `root` under the name `as_stack` (the same name by default): the stack's interruption queue,
    rules and targets, its NodeClass and NodePool."""
    for part in ("Pulumi.yaml", "stacks"):
        (shutil.copytree if (ROOT / part).is_dir() else shutil.copy)(ROOT / part, root / part)
    config = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    pools = config["config"]["higgsfield:gpuPools"]
    pools[0] = {**pools[0], "provisioner": "karpenter", "minSize": 0}
    (root / "stacks" / f"Pulumi.{as_stack or stack}.yaml").write_text(yaml.safe_dump(config))
    return record(as_stack or stack, root=root)


@functools.cache
def config_of(stack: str) -> StackConfig:
    """The validated config of a shipped stack, without evaluating the program: what a module
    needs while it is collected (every xdist worker collects every module), such as the
    parameters of its tests."""
    return load_stack(stack, root=ROOT)


@pytest.fixture(params=STACKS)
def stack(request) -> str:
    return request.param


@pytest.fixture
def plan(stack: str) -> Plan:
    return plan_of(stack)


@pytest.fixture
def stack_settings(stack: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]


@pytest.fixture
def project_copy(tmp_path: Path, monkeypatch) -> Callable[..., Path]:
    """A copy of the project's Pulumi.yaml with one stack file edited: `make(base, change)`
    writes stacks/Pulumi.bad.yaml from stack `base` with `change(config)` applied (and `base`'s
    policy config as policies/config/bad.json), and makes the
    copy the working directory (the CLI finds Pulumi.yaml from there)."""

    def make(base: str, change: Callable[[dict], None]) -> Path:
        (tmp_path / "stacks").mkdir(exist_ok=True)
        shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
        config = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{base}.yaml").read_text())
        change(config["config"])
        (tmp_path / "stacks" / "Pulumi.bad.yaml").write_text(yaml.safe_dump(config))
        (tmp_path / "policies" / "config").mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "policies" / "config" / f"{base}.json", tmp_path / "policies" / "config" / "bad.json")
        monkeypatch.chdir(tmp_path)
        return tmp_path

    return make


def set_key(key: str, value: Any) -> Callable[[dict], None]:
    """A stack change: set `key` (full name) to `value`."""

    def change(config: dict) -> None:
        config[key] = value

    return change


def set_field(key: str, field: str, value: Any) -> Callable[[dict], None]:
    """A stack change: set `field` of the object at `key`."""

    def change(config: dict) -> None:
        config[key] = {**config[key], field: value}

    return change


def set_pool(index: int, **fields: Any) -> Callable[[dict], None]:
    """A stack change: update fields of `higgsfield:gpuPools[index]`."""

    def change(config: dict) -> None:
        pools = [dict(p) for p in config["higgsfield:gpuPools"]]
        pools[index].update(fields)
        config["higgsfield:gpuPools"] = pools

    return change


def delete_key(key: str) -> Callable[[dict], None]:
    def change(config: dict) -> None:
        del config[key]

    return change


def assert_plan_rejects(project_copy, capsys, base: str, change, key: str, detail: str) -> None:
    """`higgsfield plan` on the changed stack exits 2 with a line naming `key` and saying
    `detail` (every problem of the stack gets its own line), and no traceback."""
    from infra.cli.main import main

    project_copy(base, change)
    assert main(["plan", "bad"]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err, err
    line = re.compile(rf"^(error: |\S+:\d+ )?{re.escape(key)}: ")  # `stacks/Pulumi.bad.yaml:12 KEY: message`
    assert any(line.match(text) and detail in text for text in err.splitlines()), err


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one worker more than the machine has cores. A part of the suite waits rather than
    computes (the pre-flight's time boxes, servers that linger, CLI and pip subprocesses), and a third
    worker on two cores fills those waits: 106 s with two, 97 s with three (docs/performance.md)."""
    return (os.cpu_count() or 1) + 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest tests first (a fresh install takes a core for some twenty seconds): started
    last, they would leave one xdist worker running alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("fresh_install") is None)


def pytest_collection_finish(session: pytest.Session) -> None:
    """The garbage collector, tuned for a test process as infra/cli/main.py run() is for the CLI:
    what exists once the tests are collected (the SDKs' modules and types, the stacks' configs)
    lives to the end, so it is moved out of the collector's sight (gc.freeze), and collections
    come after 50,000 allocations instead of 700 (set at this module's import, above). Each full
    collection walked every plan and validator the session keeps: 20-30% of the suite's CPU,
    measured on eight plan-heavy files."""
    gc.freeze()
