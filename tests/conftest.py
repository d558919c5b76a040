"""Shared fixtures and the GPU/ncu skip rules."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.cards.model import Report, load_report

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    cuda = _cuda_available()
    ncu = shutil.which("ncu") is not None
    for item in items:
        if "gpu" in item.keywords and not cuda:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device (none here)"))
        if "ncu" in item.keywords and not (cuda and ncu):
            item.add_marker(pytest.mark.skip(reason="needs Nsight Compute (ncu) and a CUDA device"))


@pytest.fixture(scope="session")
def seed_report() -> Report:
    return load_report()


@pytest.fixture
def stop_signals():
    """harness.signals' handlers for one test, as `python -m harness` installs them; the test process's own after."""
    import signal

    from harness import signals

    saved = {signum: signal.getsignal(signum) for signum in signals.STOP_SIGNALS}
    signals.install()
    try:
        yield signals
    finally:
        signals.finish()
        signals.reset()
        for signum, handler in saved.items():
            signal.signal(signum, handler)
