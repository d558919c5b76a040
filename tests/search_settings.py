"""The search settings a run gets (conf/search/default.yaml, typed by harness.config.schema.SearchConfig),
for tests that plan or open a study without composing a whole config."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from omegaconf import OmegaConf

from harness.config.schema import SearchConfig

DEFAULTS = Path(__file__).resolve().parents[1] / "conf" / "search" / "default.yaml"


def search_config(**values: Any) -> SearchConfig:
    """conf/search/default.yaml's settings with `values` changed."""
    node = OmegaConf.merge(OmegaConf.structured(SearchConfig), OmegaConf.load(DEFAULTS), values)
    return cast(SearchConfig, OmegaConf.to_object(node))
