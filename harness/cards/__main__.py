import sys

from harness.cards.cli import main

sys.exit(main())
