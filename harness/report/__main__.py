import signal
import sys

from harness import signals


def _main() -> int:
    from harness.report.cli import main  # imported under the handler: a Ctrl-C while it imports is one line

    return main(sys.argv[1:])


signals.install((signal.SIGINT,), raise_at_once=True)  # Ctrl-C at once, and never an exit 0 after one
signals.exit_status(_main)
