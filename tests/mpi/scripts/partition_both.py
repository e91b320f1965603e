"""Run several shardgnn command lines in one launch (argv: command lines separated by '--')."""
import sys

from rank_report import commands

from shardgnn.cli.main import main

for c in commands(sys.argv[1:]):
    code = main(c)
    if code:
        sys.exit(code)
