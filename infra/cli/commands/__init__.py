"""One module per command: `register(subparsers)` adds the command's options, next to the function
that runs it (`run(args) -> exit status`). infra/cli/main.py lists them in the order `--help` shows."""
