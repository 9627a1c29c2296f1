"""`higgsfield`: the offline commands around the Pulumi program, one module per command.

`main` is the command line; each other module computes one command's result.
"""
