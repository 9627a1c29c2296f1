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
