"""The optional packages: which pip extra brings each, and whether it is importable here, asked without
importing it (a variant's `needs=` is evaluated in the run's process, which must not load Triton or CuPy).

The base install (`pip install -e .`) has none of them. Every module that uses one imports it inside a guard
or inside the variant that needs it, and says what to install with `install_hint`; `needs_module` is the
`needs=` of a variant that cannot run at all without one (the search then does not draw it).
"""

from __future__ import annotations

import importlib.util
from typing import Callable

# Module -> how to get it, one clause a user can act on (run from the repository root).
INSTALL: dict[str, str] = {
    "triton": "pip install -e '.[triton]'",  # torch's CUDA wheels bring it too
    "cupy": "pip install -e '.[gpu-cu12]' or -e '.[gpu-cu13]', whichever matches torch.version.cuda",
    "pynvml": "pip install -e '.[gpu-cu12]' or -e '.[gpu-cu13]' (or pip install nvidia-ml-py)",
    "flash_attn": "pip install flash-attn --no-build-isolation",
    "flash_attn_interface": "build FlashAttention 3 from flash-attention's hopper/ folder",
    "diffusers": "pip install -e '.[chunk]'",
    "ncu_report": "pip install -e '.[ncu]' (or use the copy in ncu's extras/python)",
}


def install_hint(module: str) -> str:
    """How to install `module`: its extra, else its own name."""
    return INSTALL.get(module, f"pip install {module}")


def is_importable(module: str) -> bool:
    """Whether `module` can be found on this install (not imported: a found but broken package is the
    variant's own skip when it imports it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or an import hook refusing it
        return False


def missing(module: str) -> str | None:
    """One line saying `module` is missing and what to install; None when it is importable."""
    return None if is_importable(module) else f"needs {module}: {install_hint(module)}"


def needs_module(*modules: str) -> Callable[[str], str | None]:
    """A variant's `needs=`: every one of `modules` importable, on any device."""

    def check(device: str) -> str | None:
        unmet = [why for why in map(missing, modules) if why]
        return "; ".join(unmet) or None

    check.__name__ = f"needs_{'_'.join(modules)}"
    return check


def needs_any_module(*modules: str) -> Callable[[str], str | None]:
    """A variant's `needs=`: at least one of `modules` importable (e.g. FlashAttention 2 or 3)."""

    def check(device: str) -> str | None:
        if any(is_importable(m) for m in modules):
            return None
        return f"needs one of {', '.join(modules)}: " + " or ".join(install_hint(m) for m in modules)

    check.__name__ = f"needs_any_{'_'.join(modules)}"
    return check
