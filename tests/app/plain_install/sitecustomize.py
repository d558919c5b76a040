"""Makes this interpreter, and every process it starts with the same PYTHONPATH, a base install: the optional
packages are not found, as if never installed (tests/app/test_plain_install.py puts this folder first on
PYTHONPATH, so `site` imports it at start-up).

Each finder on sys.meta_path is wrapped so that it finds nothing for a hidden top-level name: `import triton`
raises ModuleNotFoundError and `importlib.util.find_spec("triton")` returns None, exactly as without the
package; importlib.metadata does not see the hidden distributions either.
"""

from __future__ import annotations

import re
import sys
from typing import Any, Iterator

HIDDEN_MODULES = frozenset({"triton", "cupy", "cupy_backends", "flash_attn", "flash_attn_interface", "diffusers",
                            "ncu_report", "pynvml"})
HIDDEN_DISTRIBUTIONS = frozenset({"triton", "cupy-cuda12x", "cupy-cuda13x", "flash-attn", "diffusers", "ncu-report",
                                  "nvidia-ml-py"})


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class _Hiding:
    """A meta-path finder that defers to `inner` for every name but the hidden ones."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname.partition(".")[0] in HIDDEN_MODULES:
            return None
        find = getattr(self._inner, "find_spec", None)
        return find(fullname, path, target) if find is not None else None

    def find_distributions(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        find = getattr(self._inner, "find_distributions", None)
        for dist in find(*args, **kwargs) if find is not None else ():
            if _normalized(dist.metadata["Name"] or "") not in HIDDEN_DISTRIBUTIONS:
                yield dist

    def invalidate_caches(self) -> None:
        invalidate = getattr(self._inner, "invalidate_caches", None)
        if invalidate is not None:
            invalidate()


sys.meta_path[:] = [_Hiding(finder) for finder in sys.meta_path]
