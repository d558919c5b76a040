"""Build a workload from an op kind and a card's shape parameters, or from a card."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from harness.cards.ids import REPLAY
from harness.workloads import attention as _attention
from harness.workloads import cast as _cast
from harness.workloads import conv2d as _conv2d
from harness.workloads import conv3d as _conv3d
from harness.workloads import dit_block as _dit_block
from harness.workloads import linear as _linear
from harness.workloads import replay as _replay
from harness.workloads import vae_decode as _vae_decode
from harness.workloads.attention import AttentionConfig
from harness.workloads.base import CHUNK_OP_KINDS, Draws, Plan, Workload
from harness.workloads.cast import CastConfig
from harness.workloads.inputs import Source, check_seed, find_and_load
from harness.workloads.params import (
    WorkloadError,
    decode_parameters,
    parse_device,
    parse_dtype,
    parse_layout,
    parse_scale,
)

# The op cards (one op each; a captured model's cards add conv2d and replay); CHUNK_OP_KINDS: chunk cards.
OP_KINDS = ("linear", "conv3d", "attention", "cast", "conv2d", REPLAY)

# Scales at which the largest card of each kind runs in well under a second per call on a 2-core CPU
# (float32, measured on the biggest report cards). Attention cost falls
# with the square of the scale (queries x keys), as do conv3d (H x W) and linear (M x N).
# A VAE decode chunk runs the whole decoder: 0.04 leaves one latent frame of 2x1 (0.2 to 1 s per call).
# A DiT block streams its 351 M weights whatever the tokens: 0.01 leaves 12 of 1170 (about 0.8 s per call).
# conv2d shrinks as conv3d does (H x W); a replayed op is never scaled (harness.workloads.replay).
CPU_SCALES = {"linear": 0.25, "conv3d": 0.25, "attention": 0.1, "cast": 0.5, "conv2d": 0.25, REPLAY: 1.0,
              "vae_decode": 0.04, "dit_block": 0.01}
_MODULES = {"linear": _linear, "conv3d": _conv3d, "attention": _attention, "cast": _cast, "conv2d": _conv2d,
            REPLAY: _replay, "vae_decode": _vae_decode, "dit_block": _dit_block}
# The memory formats each op kind's builder takes besides contiguous (`layout=`); every other kind takes none.
_LAYOUTS = {"conv3d": ("channels_last_3d",), "cast": ("channels_last_3d",), "conv2d": ("channels_last",)}
# The defaults of plan_workload/build_workload: frozen dataclasses, so one shared instance each.
_DEFAULT_ATTENTION = AttentionConfig()
_DEFAULT_CAST = CastConfig()


def required_packages(op_kind: str) -> tuple[str, ...]:
    """The optional packages building `op_kind`'s workload imports (its module's REQUIRES: the chunk cards'
    diffusers models). Whether this install has them is asked where the install is described
    (harness.trial.describe), so that a missing one is an error or a left-out card before any card, not a crash."""
    return tuple(getattr(_MODULES.get(op_kind), "REQUIRES", ()))


def plan_workload(
    op_kind: str,
    shape_parameters: Any,
    *,
    dtype: str | torch.dtype = "float32",
    scale: float = 1.0,
    attention: AttentionConfig = _DEFAULT_ATTENTION,
    cast: CastConfig = _DEFAULT_CAST,
    resolution: str | None = None,
) -> Plan:
    """The shape, output shape, FLOPs and minimum bytes of a card's op at `scale`, without tensors."""
    if op_kind not in _MODULES:
        raise WorkloadError(f"unknown op kind {op_kind!r}; known: {', '.join(OP_KINDS + CHUNK_OP_KINDS)}")
    params = decode_parameters(op_kind, shape_parameters)
    torch_dtype = parse_dtype(dtype)
    factor = parse_scale(scale)
    if op_kind == "attention":
        return _attention.plan(params, dtype=torch_dtype, scale=factor, config=attention, resolution=resolution)
    if op_kind == "cast":
        return _cast.plan(params, dtype=torch_dtype, scale=factor, config=cast, resolution=resolution)
    return _MODULES[op_kind].plan(params, dtype=torch_dtype, scale=factor)


def layout_for(op_kind: str, layout: str | None) -> str | None:
    """`layout` checked against what `op_kind`'s builder takes ("channels_last" is the 4-D format for a 4-D
    kind, else the alias of channels_last_3d it always was)."""
    takes = _LAYOUTS.get(op_kind, ())
    value = parse_layout(layout, dims=4 if "channels_last" in takes else 5)
    if value not in (None, "contiguous", *takes):
        kinds = [kind for kind, names in _LAYOUTS.items() if value in names]
        raise WorkloadError(f"{op_kind}: layout {value!r} applies to {' and '.join(kinds)} only")
    return value


def build_workload(
    op_kind: str,
    shape_parameters: Any,
    *,
    device: str = "cpu",
    dtype: str | torch.dtype = "float32",
    layout: str | None = None,
    scale: float = 1.0,
    seed: int = 0,
    inputs_dir: str | None = None,
    input_sha256: str | None = None,
    attention: AttentionConfig = _DEFAULT_ATTENTION,
    cast: CastConfig = _DEFAULT_CAST,
    resolution: str | None = None,
) -> Workload:
    """Materialize a card's op: inputs on `device` in `dtype`/`layout`, a baseline `run`, roofline facts.

    `dtype` is the dtype of the op's inputs (a cast's source dtype; a replayed op keeps its recorded ones).
    `layout` is None/"contiguous", "channels_last_3d" for conv3d and cast, or "channels_last" for conv2d. The
    input is the captured tensor named by `input_sha256` in `inputs_dir` when one is there (verified; see
    harness.workloads.inputs), otherwise synthetic data from `seed`. `resolution` (the card's, e.g.
    "480x832") sizes attention queries and cast frames.
    """
    plan = plan_workload(op_kind, shape_parameters, dtype=dtype, scale=scale, attention=attention, cast=cast,
                         resolution=resolution)
    where = parse_device(device)
    shape_layout = layout_for(op_kind, layout)
    seed = check_seed(seed)
    captured, why_synthetic = find_and_load(inputs_dir, input_sha256)
    source = Source(captured, seed, where)
    built = _MODULES[op_kind].build(plan, source, shape_layout)
    activations = tuple(built["activations"])
    bound = built["bind"]({name: built["inputs"][name] for name in activations})
    return Workload(
        op_kind=op_kind,
        shape=plan.shape,
        original_shape=plan.original_shape,
        scale=plan.scale,
        device=where,
        dtype=plan.dtype,
        layout=shape_layout,
        inputs={**built["inputs"], **bound.derived},
        run=bound.run,
        flops=plan.flops,
        min_bytes=plan.min_bytes,
        reduction_length=plan.reduction_length,
        input_source=source.input_source(),
        output_shape=built.get("output_shape", plan.output_shape),
        notes=_notes(plan, source, built, activations, why_synthetic),
        seed=seed,
        input_hash=(
            {**captured.record(), "tensors": list(source.used), "sliced": list(source.sliced)}
            if captured is not None and source.used
            else None
        ),
        _reference=bound.reference,
        module=built.get("module"),
        activations=activations,
        before_call=bound.before_call,
        _draws=Draws(bind=built["bind"], spreads={name: source.spreads[name] for name in activations}, seed=seed,
                     varying=built.get("varying", {}), calls=built.get("calls"),
                     second_call={n: source.second_call[n] for n in activations if n in source.second_call}),
        _bound=bound.reference,
    )


def _notes(plan: Plan, source: Source, built: dict[str, Any], activations: tuple[str, ...],
           why_synthetic: str | None) -> list[str]:
    """What a workload's card says about how it was built: the plan's notes, the builder's, where the inputs
    came from and what other draws of them are."""
    notes = [*plan.notes, *built.get("notes", ())]
    if why_synthetic is not None:
        notes.append(why_synthetic)
    notes.extend(source.summary_notes())
    captured_activations = [name for name in activations if name in source.used]
    if captured_activations:
        second = [name for name in captured_activations if name in source.second_call]
        notes.append(f"other draws of the captured {', '.join(captured_activations)} (Workload.redraw, calls) are "
                     "seeded at its measured spread"
                     + (f", but draw 1 of {', '.join(second)} is the op's captured second call" if second
                        else ": a captured file holds one call of the op"))
    if plan.scale < 1.0:
        notes.append(f"scaled by {plan.scale:g}: {plan.original_shape} -> {plan.shape}")
    return notes


# ---------------------------------------------------------------------------------------------
# From a card


def cast_frames_from_report(card: Any, report: Any) -> int | None:
    """9 or 12 for an output cast card, from the pair of cast cards of its resolution (None if unclear).

    The two cards of a resolution differ 3:4 in duration and in waves, consistent with 9 and 12 frames;
    the shorter one is the 9-frame cast. Durations in the report can be in the wrong unit, so the pair
    is used only when its duration ratio is within 10% of 4/3.
    """
    if report is None or card.op_kind != "cast":
        return None
    pair = [
        c
        for c in report.cards
        if c.op_kind == "cast" and c.resolution == card.resolution and c.summed_kernel_us is not None
    ]
    if len(pair) != 2 or card not in pair:
        return None
    short, long = sorted(pair, key=lambda c: c.summed_kernel_us)
    ratio = long.summed_kernel_us / short.summed_kernel_us if short.summed_kernel_us else 0.0
    if abs(ratio - 4.0 / 3.0) > 0.1 * 4.0 / 3.0:
        return None
    return 9 if card is short else 12


def _card_options(card: Any, report: Any, options: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    options = dict(options)
    options.setdefault("resolution", card.resolution or None)
    note = None
    if card.op_kind == "cast":
        config = options.get("cast", CastConfig())
        if config.frames is None and "frames" not in card.shape_parameters:
            frames = cast_frames_from_report(card, report)
            if frames is not None:
                options["cast"] = replace(config, frames=frames)
                note = f"frames={frames} from the pair of cast cards at {card.resolution} (the shorter is 9 frames)"
    return options, note


def plan_for_card(card: Any, report: Any = None, **options: Any) -> Plan:
    """`plan_workload` for a harness.cards.model.Card (its op kind, shape parameters and resolution)."""
    options, note = _card_options(card, report, options)
    plan = plan_workload(card.op_kind, card.shape_parameters, **options)
    return replace(plan, notes=(*plan.notes, note)) if note else plan


def build_for_card(card: Any, report: Any = None, **options: Any) -> Workload:
    """`build_workload` for a Card: its op kind, shape parameters, resolution and input_sha256.

    Pass the `report` to let an output cast card take its frame count (9 or 12) from its pair.
    """
    options, note = _card_options(card, report, options)
    options.setdefault("input_sha256", card.input_sha256)
    workload = build_workload(card.op_kind, card.shape_parameters, **options)
    if note:
        workload.notes.insert(0, note)
    return workload


__all__ = [
    "CHUNK_OP_KINDS",
    "CPU_SCALES",
    "OP_KINDS",
    "AttentionConfig",
    "CastConfig",
    "build_for_card",
    "build_workload",
    "cast_frames_from_report",
    "plan_for_card",
    "plan_workload",
    "required_packages",
]
