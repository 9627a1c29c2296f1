"""Commands of an installed package, run through its own entry point (infra.cli.main:main, what the
console script calls) in one interpreter of its virtualenv: importing the Pulumi SDKs is about 2 s a
process. Used by the install tests (tests/cli/test_fresh_install.py, test_own_project.py).

The driver answers each evaluation of the program once per input, as tests/conftest.py's Memo does in
the suite's own processes: what `_record_in_fresh_context(stack, config, secret_keys)` returns depends
on those and on the project (the working directory: its image sources are the image tag), so `check`,
`cost`, `timeline` and `preflight` of one stack in one project share the first one's plan (each a
copy) instead of evaluating it again, and each command still runs all of its own code from the
installed package. Like the console script (infra/cli/main.py run), the driver runs without the cyclic
garbage collector and ends without the interpreter's teardown."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

DRIVER = """
import contextlib, gc, io, json, os, pickle, sys
gc.disable()
from infra.offline import evaluate
from infra.cli.main import main

evaluated, plans = evaluate._record_in_fresh_context, {}

def once(stack, config, secret_keys=None):
    key = json.dumps([os.getcwd(), stack, config, sorted(secret_keys or [])], sort_keys=True)
    if key not in plans:
        plans[key] = pickle.dumps(evaluated(stack, config, secret_keys))
    return pickle.loads(plans[key])

evaluate._record_in_fresh_context = once
done = {}
for name, (cwd, argv) in json.loads(sys.argv[1]).items():
    os.chdir(cwd)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    done[name] = [code, out.getvalue(), err.getvalue()]
print(json.dumps(done))
sys.stdout.flush()
os._exit(0)
"""


def run_commands(venv: Path, env: dict[str, str], commands: dict[str, tuple[Path, list[str]]]) -> dict[str, list]:
    """{name: [exit code, stdout, stderr]} of each command (`name: (working directory, argv)`), in order, run by
    the virtualenv's Python."""
    argv = [str(venv / "bin" / "python"), "-c", DRIVER, json.dumps({k: [str(c), a] for k, (c, a) in commands.items()})]
    first = next(iter(commands.values()))[0]
    done = subprocess.run(argv, cwd=first, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"the commands' driver: {done.stderr[-3000:]}"
    return json.loads(done.stdout)
