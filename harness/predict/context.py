"""What a predictor is handed for one card: the report's card (normalized), the device and what the card is built
in there, the op's work at the shape the device runs and at the card's own, and whether the card's kernel
times are measurements of this very device at this very shape (the report's GPU at full size): then the
kernels' times are used as they are, elsewhere each term is timed by its roofline on the device."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from harness.cards.dtype import CardDtype
from harness.cards.model import Card
from harness.predict.device import ELEMENT_BYTES, DeviceModel
from harness.predict.work import Work, work_of


@dataclass(frozen=True)
class Context:
    card: Card  # the report's card, normalized (lint's corrections applied)
    device: DeviceModel
    dtype: CardDtype  # what the card is built in on the device (harness.cards.dtype)
    work: Work | None  # the op's work at the shape the device runs (a run's workload scale)
    measured_here: bool  # the card's kernel times were measured on this device at this shape
    scale: float = 1.0

    @property
    def element_bytes(self) -> int:
        return ELEMENT_BYTES.get(self.dtype.dtype, 4)

    def where(self) -> str:
        """'H200 (the report's kernel times)' or 'CPU AMD EPYC (rooflines at scale 0.25)', for a basis."""
        if self.measured_here:
            return f"{self.device.name}, the report's kernel times"
        return f"{self.device.name}, rooflines at the measured peaks" if self.device.kind == "cpu" else \
            f"{self.device.name}, rooflines at its table peaks" + (f", scale {self.scale:g}" if self.scale != 1 else "")


def make_context(card: Card, device: DeviceModel, dtype: CardDtype, *, report_device: str | None,
                 shape: Mapping[str, Any] | None = None, scale: float = 1.0) -> Context:
    """A card's context on `device`; `shape`: the shape the device runs (the worker's plan at a run's scale; the
    card's own by default). The card's times are this device's when it is the report's GPU at full size."""
    ran = shape if shape is not None else card.shape_parameters
    same_device = report_device is not None and device.kind == "gpu" and _same_gpu(device.name, report_device)
    return Context(card=card, device=device, dtype=dtype, work=work_of(card.op_kind, ran),
                   measured_here=same_device and scale == 1.0, scale=scale)


def _same_gpu(table_entry: str, report_device: str) -> bool:
    """Whether the report's GPU (a name as declared: "H200", "NVIDIA H200") is this table entry."""
    from harness.hardware.gpu_peaks import lookup

    return lookup(report_device).key == table_entry
