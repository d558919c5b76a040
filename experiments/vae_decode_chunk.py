"""The VAE op cards' counter-experiments composed on the whole decode of one realtime chunk.

vae_channels_last and vae_bf16 change one conv3d in isolation. Here the same changes are made to the
whole Wan 2.1 decoder, as a model would make them, and the chunk (harness.workloads.vae_decode: the
streaming decode of one chunk's latent frames from its causal cache) is timed as one: whether the
layout survives the pads, cats, norms and upsamplings between the convs, whether bf16 pays off once
every op runs in it, and whether the op cards' wins add up. The chunk card's diff row breaks the
profiled time down per contained op card (harness.trial.chunks.op_breakdown).
"""

from __future__ import annotations

import copy
import itertools
from collections import Counter
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from experiments.vae_bf16 import LowPrecision, _cpu_has_bf16_math
from harness.api.chunks import attribute
from harness.api.experiment import Experiment, Prepared, VariantSkipped
from harness.workloads.base import Workload
from harness.workloads.params import dtype_name, parse_dtype

EXPERIMENT = Experiment(
    name="vae_decode_chunk",
    op_kinds=("vae_decode",),
    hypothesis="the VAE op cards' wins hold when the ops run together: channels_last_3d kept end to end "
    "through the decoder, and bf16 weights and activations, make the whole chunk's decode faster",
    check="effective_flops",
)

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
_CHANNELS_LAST_RECIPE = (
    "for t in itertools.chain(vae.parameters(), vae.buffers()):\n"
    "    if t.dim() == 5:  # vae.to(memory_format=torch.channels_last_3d) refuses the 4-D Conv2d weights\n"
    "        t.data = t.data.contiguous(memory_format=torch.channels_last_3d)\n"
    "z = z.contiguous(memory_format=torch.channels_last_3d)  # the latent, once per chunk"
)


class _LayoutTrace(TorchFunctionMode):
    """Where channels_last_3d holds in one call: the conv3d inputs that arrive in it (after the causal
    conv's cat and pad), and the ops that return NCDHW from a channels_last_3d input."""

    def __init__(self) -> None:
        super().__init__()
        self.conv3d_calls = 0
        self.conv3d_channels_last = 0
        self.lost_at: Counter[str] = Counter()

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        flat = [t for a in args for t in (a if isinstance(a, (list, tuple)) else [a])]  # torch.cat takes a list
        inputs = [t for t in flat if isinstance(t, torch.Tensor) and t.dim() == 5]
        if func is F.conv3d or func is torch.conv3d:
            self.conv3d_calls += 1
            self.conv3d_channels_last += _channels_last(inputs[0])
        if isinstance(out, torch.Tensor) and out.dim() == 5 and any(map(_channels_last, inputs)) \
                and not _channels_last(out):
            self.lost_at[getattr(func, "__name__", str(func))] += 1
        return out

    def facts(self) -> dict[str, str]:
        lost = ", ".join(f"{name} x{n}" for name, n in self.lost_at.most_common()) or "nowhere"
        return {"conv3d_inputs_channels_last": f"{self.conv3d_channels_last} of {self.conv3d_calls}",
                "channels_last_lost_at": lost}


def _channels_last(tensor: torch.Tensor) -> bool:
    """Laid out channels_last_3d and not also plain contiguous (a tensor with C = 1 or H = W = 1 is both)."""
    return tensor.is_contiguous(memory_format=torch.channels_last_3d) and not tensor.is_contiguous()


def _decode(module: torch.nn.Module, latent: torch.Tensor) -> Callable[[], torch.Tensor]:
    def run() -> torch.Tensor:
        with torch.no_grad():
            return module(latent)
    return run


def _variant(w: Workload, dtype: torch.dtype | None, channels_last: bool) -> Prepared:
    """The decoder (its primed cache included) converted as asked, on the latent converted the same way;
    with channels_last, where the layout held in one untimed call (the variant's facts)."""
    if dtype == torch.float16 and w.device == "cpu":
        raise VariantSkipped("fp16 convolutions have no fast CPU kernel; run it on CUDA")
    if dtype == torch.bfloat16 and w.device == "cpu" and not _cpu_has_bf16_math():
        # A bf16 conv3d is emulated on such a CPU, at a small fraction of fp32 speed: timing it says
        # nothing about bf16 on a GPU, and the decode would take minutes per call.
        raise VariantSkipped("this CPU has no bf16 math (no AVX512-BF16 or AMX): bf16 convolutions are emulated "
                             "at a fraction of fp32 speed; run it on CUDA or a CPU with AMX")
    if w.module is None:
        raise VariantSkipped(f"a {w.op_kind} workload has no module to convert")
    module = copy.deepcopy(w.module)
    latent = w.inputs["latent"]
    if dtype is not None:
        module, latent = module.to(dtype), latent.to(dtype)
    precision = None if dtype is None else dtype_name(dtype)
    recipes, facts = [], {}
    if precision is not None:
        recipes.append(f"vae.to(torch.{precision}); z = z.to(torch.{precision})  # the frames come out {precision}")
    if channels_last:
        for tensor in itertools.chain(module.parameters(), module.buffers()):
            if tensor.dim() == 5:
                tensor.data = tensor.data.contiguous(memory_format=torch.channels_last_3d)
        latent = latent.contiguous(memory_format=torch.channels_last_3d)
        with _LayoutTrace() as trace, torch.no_grad():
            module(latent)
        facts = trace.facts()
        recipes.append(_CHANNELS_LAST_RECIPE)
    return Prepared(_decode(module, latent), precision=precision, facts=facts, recipe="\n".join(recipes))


@EXPERIMENT.baseline
def ncdhw_fp32(w: Workload) -> Callable[[], torch.Tensor]:
    """The decoder as the report ran it: fp32 (TF32 on cuDNN by torch's default), NCDHW."""
    return w.run


@EXPERIMENT.variant
def channels_last_3d(w: Workload) -> Prepared:
    """Every 5-D weight, the cache and the latent channels_last_3d, kept end to end through the decoder."""
    return _variant(w, None, channels_last=True)


@EXPERIMENT.variant
def low_precision(w: Workload, dtype: LowPrecision = "bfloat16") -> Prepared:
    """The whole decoder, its cache and the latent in bf16 or fp16, NCDHW: held to that dtype's rounding."""
    return _variant(w, _DTYPES[dtype], channels_last=False)


@EXPERIMENT.variant
def channels_last_low_precision(w: Workload, dtype: LowPrecision = "bfloat16") -> Prepared:
    """Both: the decoder, its cache and the latent in bf16 or fp16 and channels_last_3d end to end."""
    return _variant(w, _DTYPES[dtype], channels_last=True)


@EXPERIMENT.variant
def composed(w: Workload) -> Prepared:
    """What the op-card runs of `experiment.compose_from` adopted on this chunk's conv cards, composed on the
    whole decoder through what each adopted variant carries (harness.trial.rounds): a channels_last_3d input or
    weight keeps the decoder channels_last_3d end to end, a dtype puts the decoder in it."""
    carried = [(card_id, entry, change) for card_id, entries in w.adopted.items() for entry in entries
               for change in entry.carries.values()]
    if not carried:
        why = ("no op-card run given (experiment.compose_from=<best.json>)" if not w.adopted else
               f"the adopted variants on {', '.join(sorted(w.adopted))} carry no layout or dtype to compose")
        raise VariantSkipped(why)
    dtypes = {change["dtype"] for _, _, change in carried if "dtype" in change}
    if len(dtypes) > 1:
        raise VariantSkipped(f"the op cards adopted different dtypes ({', '.join(sorted(dtypes))}): one decoder "
                             "runs in one")
    channels_last = any(change.get("memory_format") == "channels_last_3d" for _, _, change in carried)
    prepared = _variant(w, parse_dtype(dtypes.pop(), "an adopted dtype") if dtypes else None, channels_last)
    prepared.facts["composed"] = sorted({f"{card_id}: {entry.label}" for card_id, entry, _ in carried})
    return prepared


@EXPERIMENT.annotate
def name_report_cards(card: Any, workload: Workload) -> None:
    """Each profiled convolution gets the contained report card of its shape (kernel extra `report_card`)."""
    attribute(card)
