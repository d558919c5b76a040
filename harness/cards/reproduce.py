"""Reproduction as a verdict: did this machine run the report's op, the report's way, at the report's speed?

A baseline measured on the report's GPU is worth comparing with only when it ran the report's kernels: a
float32 linear ran fp32 cuBLAS where the report ran a bf16 nvjet GEMM, at 17x the time, and every verdict
built on it would judge another op. Per card, against its report card:

- `REPRODUCED`: the same kernel families (the names that survive tile and template changes, those that carry
  at least `MAIN_SHARE` of either side's kernel time) and the kernel time within +/-`TIME_BAND`, on the
  report's GPU class;
- `OTHER_KERNELS`: the families differ (another op, dtype or layout ran): each side's families named;
- `OTHER_SPEED`: the same families, the time outside the band;
- `NOT_COMPARABLE`: another device class, or only estimates (a CPU's roofline), or no report card.

Times are kernel-duration sums per original call (the report's `summed_kernel_us`, else its kernels' sum;
here the profiled kernels'), so a trace's CUPTI durations and ncu's replayed ones both compare. The class is
compared only when both sides were read by counters (ncu): a class from estimates is another claim.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

from harness.cards.fields import SOURCE_NCU
from harness.cards.kernel_families import kernel_family
from harness.cards.labels import class_source
from harness.cards.launches import per_invocation_value
from harness.cards.measures import calls_per_invocation, kernel_sum_us
from harness.cards.model import CAPTURE_KEY, DEVICE_KEY, Card, Report, ReportError

TIME_BAND = 0.15
MAIN_SHARE = 0.05  # a family under 5% of a side's kernel time (a bias add, FA3's block count) is not the op


class Reproduction(str, Enum):
    REPRODUCED = "REPRODUCED"
    OTHER_KERNELS = "OTHER_KERNELS"
    OTHER_SPEED = "OTHER_SPEED"
    NOT_COMPARABLE = "NOT_COMPARABLE"


@dataclass(frozen=True)
class CardReproduction:
    card: str
    verdict: Reproduction
    families_report: list[str]
    families_here: list[str]
    time_ratio: float | None  # here / report
    class_report: str | None
    class_here: str | None
    class_compared: bool
    reason: str
    device_here: str | None
    dtype_here: str | None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": self.verdict.value}

    def line(self) -> str:
        ratio = f"{self.time_ratio:.2f}x the report's time" if self.time_ratio is not None else "no time ratio"
        return f"`{self.card}`: {self.verdict.value} ({ratio}; {self.reason})"


def _families(card: Card) -> tuple[list[str], list[str]]:
    """(every family, longest first; the main ones: at least MAIN_SHARE of the card's kernel time)."""
    sums: dict[str, float] = {}
    for kernel in card.kernels:
        family = kernel_family(kernel.name)
        sums[family] = sums.get(family, 0.0) + (per_invocation_value(card, kernel, kernel.metric("dur_us")) or 0.0)
    ordered = sorted(sums, key=lambda f: -sums[f])
    total = sum(sums.values())
    main = [f for f in ordered if total <= 0 or sums[f] >= MAIN_SHARE * total]
    return ordered, main


def _report_time_us(card: Card) -> float | None:
    if card.summed_kernel_us:
        return card.summed_kernel_us
    return kernel_sum_us(card)


def _here_time_us(card: Card) -> float | None:
    total = kernel_sum_us(card)
    return total / calls_per_invocation(card) if total is not None else None


def _environment(card: Card) -> dict[str, Any]:
    env = card.extra.get("environment")
    return env if isinstance(env, dict) else {}


def _dtype_here(card: Card) -> str | None:
    workload = card.extra.get("workload")
    if not isinstance(workload, dict) or not workload.get("dtype"):
        return None
    source = workload.get("dtype_source")
    return f"{workload['dtype']} ({source})" if source else str(workload["dtype"])


def reproduce_card(here: Card, report_card: Card, report_device: str | None,
                   here_device: str | None = None) -> CardReproduction:
    """The verdict of one measured card against its report card (the module's docstring gives the rules).
    `here_device`: the GPU the measured side's report declares, for a card that records no environment (a
    report's own card, e.g. an ncu import's: ncu read it on that GPU)."""
    env = _environment(here)
    device = env.get("device_name") or env.get("cpu_name") or (here_device if not env else None)
    on_gpu = env.get("device_kind") == "cuda" if env else here_device is not None
    families_report, main_report = _families(report_card)
    families_here, main_here = _families(here)
    t_report, t_here = _report_time_us(report_card), _here_time_us(here)
    ratio = t_here / t_report if t_here is not None and t_report else None
    source_here = class_source(here)
    class_compared = source_here == SOURCE_NCU and report_card.primary is not None  # a damaged card has none
    common = dict(card=here.id, families_report=families_report, families_here=families_here, time_ratio=ratio,
                  class_report=report_card.primary, class_here=here.primary, class_compared=class_compared,
                  device_here=device, dtype_here=_dtype_here(here))

    def verdict(kind: Reproduction, reason: str) -> CardReproduction:
        return CardReproduction(verdict=kind, reason=reason, **common)  # type: ignore[arg-type]

    if not on_gpu:
        return verdict(Reproduction.NOT_COMPARABLE,
                       f"measured on {device or 'an unrecorded device'} ({source_here}): only estimates")
    if report_device is None:
        return verdict(Reproduction.NOT_COMPARABLE,
                       "the report names no GPU: give report_device= (a run) or --report-device")
    if report_device.lower() not in str(device).lower():
        return verdict(Reproduction.NOT_COMPARABLE, f"measured on {device}, the report on {report_device}")
    if not main_here or not main_report:
        side = "here" if not main_here else "in the report"
        return verdict(Reproduction.NOT_COMPARABLE, f"no kernels {side}")
    class_note = ""
    if class_compared and report_card.primary != here.primary:
        class_note = f"; class {report_card.primary} in the report, {here.primary} here (both ncu)"
    if set(main_here) != set(main_report):
        return verdict(Reproduction.OTHER_KERNELS,
                       f"report ran {', '.join(main_report)}; here {', '.join(main_here)}"
                       + (f", built in {common['dtype_here']}" if common["dtype_here"] else ""))
    if ratio is None:
        return verdict(Reproduction.NOT_COMPARABLE, "the same kernels, but a side has no kernel time")
    if abs(ratio - 1.0) > TIME_BAND:
        return verdict(Reproduction.OTHER_SPEED,
                       f"the same kernels at {ratio:.2f}x the report's time (band +/-{TIME_BAND:.0%})" + class_note)
    return verdict(Reproduction.REPRODUCED,
                   f"the same kernels within +/-{TIME_BAND:.0%} ({', '.join(main_here)})" + class_note)


def reported_device(report: Report, given: str | None = None) -> str | None:
    """The device the report was profiled on, the one place that decides it: `given` (`report_device=`,
    `--report-device`) where set, else what the report declares (its `device` key, `<report>.declared.json`: the
    shipped report's H200, or the GPU a capture ran on), else the CPU a CPU capture ran on (its
    `capture.device_name`: a CPU names no GPU, so nothing is judged against one); None: none of them."""
    declared = report.extra.get(DEVICE_KEY)
    if given or declared:
        return given or str(declared)
    capture = report.extra.get(CAPTURE_KEY)
    cpu = capture.get("device_name") if isinstance(capture, dict) and capture.get("device") == "cpu" else None
    return str(cpu) if cpu else None


def reproduce(measured: Report, report: Report, report_device: str | None = None) -> list[CardReproduction]:
    """Each measured card's verdict against the report card of its id (`report_device`: the report's own)."""
    device = reported_device(report, report_device)
    # A report's `device` declares the GPU its own cards were read on (an ncu import's, a GPU capture's).
    here_device = str(measured.extra[DEVICE_KEY]) if measured.extra.get(DEVICE_KEY) else None
    out = []
    for card in measured.cards:
        try:
            report_card = report.card(card.id)
        except ReportError:
            out.append(CardReproduction(card.id, Reproduction.NOT_COMPARABLE, [], _families(card)[0], None, None,
                                        card.primary, False, "no card of this id in the report", None, None))
            continue
        out.append(reproduce_card(card, report_card, device, here_device))
    return out


def headline(results: list[CardReproduction]) -> str | None:
    """The run's first summary line when a baseline on the report's GPU ran other kernels; None otherwise."""
    other = [r for r in results if r.verdict is Reproduction.OTHER_KERNELS]
    if not other:
        return None
    return (f"{len(other)} of {len(results)} baseline card(s) ran other kernels than the report on its GPU class "
            f"({', '.join(r.card for r in other)}): their verdicts judge another op; no saving is projected "
            "from them")
