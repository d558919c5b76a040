import pytest

from harness.cards.model import load_report


@pytest.fixture(scope="session")
def report():
    return load_report()
