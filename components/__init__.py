"""Higgsfield's ComponentResources: one concern each, wired together by infra/__main__.py."""
