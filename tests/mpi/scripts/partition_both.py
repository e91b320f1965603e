"""Run several shardgnn command lines in one launch (argv: command lines separated by '--')."""
import sys

from shardgnn.cli.main import main

cmds, cur = [], []
for a in sys.argv[1:]:
    if a == "--":
        cmds.append(cur)
        cur = []
    else:
        cur.append(a)
cmds.append(cur)
for c in cmds:
    code = main(c)
    if code:
        sys.exit(code)
