"""`higgsfield completion SHELL`: the shell's completion script, through argcomplete (the maintained
argparse completion library), and what a STACK argument completes to."""

from __future__ import annotations

from typing import Any


def script(shell: str) -> str:
    """What `eval "$(higgsfield completion bash)"` (or zsh, fish, tcsh) needs."""
    import argcomplete

    return argcomplete.shellcode(["higgsfield"], shell=shell)


def stacks_here(**_kwargs: Any) -> list[str]:
    """Completion of a STACK argument: the stack files of the project here."""
    from infra.core.project import project_root, stack_names

    return stack_names(project_root())


def examples_shipped(**_kwargs: Any) -> list[str]:
    """Completion of an EXAMPLE argument: the shipped examples (a team's own job file goes with -f)."""
    from infra.core.assets import shipped

    return sorted(p.stem for p in shipped("examples").glob("*.yaml") if not p.stem.endswith(".job"))


def pools_of_stack(parsed_args: Any = None, **_kwargs: Any) -> list[str]:
    """Completion of a POOL argument: the GPU pools of the stack already on the command line."""
    from infra.offline.evaluate import load_stack

    try:
        return [p.name for p in load_stack(parsed_args.stack).gpu_pools]
    except Exception:  # no stack yet, or one that does not load: nothing to offer, never a traceback
        return []
