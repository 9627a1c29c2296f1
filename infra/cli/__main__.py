"""`python -m infra.cli`: the same as the `higgsfield` command."""

from infra.cli.main import run

if __name__ == "__main__":
    run()
