"""The bottom layer: what every other layer shares and that imports nothing of ours: the names
(labels, taints, derived names), the version pins, the instance catalog and the project's paths."""
