"""Presentation of the offline reports: text tables, the ASCII Gantt, Mermaid. Each module turns
what a computing module (infra/offline/cost.py, plan.py, timeline.py) returns into text; none
computes a figure of its own. Every text report fits WIDTH columns."""

WIDTH = 120
