import sys

from harness.capture.cli import main

sys.exit(main())
