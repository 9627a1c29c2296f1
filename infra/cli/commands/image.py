"""`higgsfield image build|push STACK`: the training image, built or pushed with docker."""

from __future__ import annotations

import argparse

from infra.cli.arguments import stack_argument

ACTIONS = (
    ("build", "docker build the image, tagged as the stack's jobs and health gate name it"),
    ("push", "build it, log in to the stack's ECR repository and push it (unless the tag is there); print its digest"),
)


def register(sub: argparse._SubParsersAction) -> None:
    image = sub.add_parser(
        "image", help="build or push the training image (images/training) into the stack's ECR repository, with docker"
    )
    actions = image.add_subparsers(dest="image_command", required=True, metavar="ACTION")
    for action, what in ACTIONS:
        step = actions.add_parser(action, help=what)
        stack_argument(step)
        step.add_argument("--print", action="store_true", help="print the commands instead of running them")
        step.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from infra.offline import image
    from infra.offline.evaluate import load_stack

    cfg = load_stack(args.stack)
    if args.print:
        print(image.script(cfg, args.image_command))
        return 0
    return image.run(cfg, args.image_command)
