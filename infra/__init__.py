"""Higgsfield: the Pulumi program (__main__), its typed config, pinned versions and CLI."""
