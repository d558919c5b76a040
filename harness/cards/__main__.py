"""`python -m harness.cards` was the command line over report files; it is `python -m harness.report` now."""

import shlex
import sys

print(f"error: the report commands moved: python -m harness.report {shlex.join(sys.argv[1:]) or '--help'}",
      file=sys.stderr)
sys.exit(2)
