"""`python -m shardgnn` runs the command line."""
import sys

from shardgnn.cli.main import main

sys.exit(main())
