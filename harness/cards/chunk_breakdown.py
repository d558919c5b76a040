"""Measured chunk cards: which contained op card each profiled kernel stands for, and the diff row's
`op_breakdown` and prediction from the op cards' own results. Torch-free: the run's side writes the diff
(harness.run.outputs), and an experiment's `annotate` in the worker names the cards on the kernels alike.

A measured chunk card's kernels are every op the chunk ran, one per op, input shapes and the top-level
op it ran under (the CPU profiler's per-shape profile; on a GPU, torch_cuda's kernels with the op and scope
that launched them, read from the trace), and `attribute` names on each the contained card of its
top-level op: a VAE convolution by its shape (its place in the decoder, `conv3d_key`: a conv's own copies
count toward its card, as in the op card), a DiT block's linear by the profiler scope of its module
(`DIT_SCOPE` + the module's name: the shape alone cannot tell q from the output projection) and its
attention by its query and key lengths. On a GPU the torch_cuda backend names each kernel's launching op
and scope from the trace (harness.profile.torch_trace: Trace.callers); the ncu backend does not, and
torch.compile drops the scopes: those kernels count as `other`. `op_breakdown` puts the two sides of a diff
row side by side per contained card, plus `other` (everything no op card stands for: norms, SiLU,
upsampling, the 2-D convs, copies), so the entries add up to each side's profiled total.

The chunk cards themselves are derived from the report in the worker (harness.trial.chunks, harness.trial.dit_chunks),
each made by `chunk_card`.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from harness.cards.ids import CHUNK_OP_KINDS
from harness.cards.model import Card, Kernel

# The DiT block's op kind and the profiler scope it runs each block linear under (+ the module's name):
# harness.workloads.dit_block's KIND and SCOPE, copied here because that module imports torch
# (tests/app/test_torch_free_parent.py holds the copies equal).
DIT_BLOCK = "dit_block"
DIT_SCOPE = "dit_block/"
OTHER = "other"  # op_breakdown's entry for the ops no contained card stands for

Key = tuple[int, ...]  # (Cin, Cout, kT, kH, kW, level)


def chunk_card(*, stage: str, op: str, part: str, resolution: str, shape: dict[str, Any], contains: list[str],
               flops: float, chunk: dict[str, Any]) -> Card:
    """A chunk card derived from the report's op cards it `contains`: the whole `part` of the model (decode,
    block) at `resolution`; its id names the stage, resolution and part, and a digest of its group, resolution and
    contained cards; its counter-experiment composes theirs."""
    group = f"{stage}:{op}:{shape}"
    digest = hashlib.sha256("|".join([group, resolution, *contains]).encode()).hexdigest()[:6]
    return Card(
        group=group, resolution=resolution, stage=stage, op=op, shape_parameters=shape, kernels=[],
        nominal_mac_flops=flops,
        counter_experiment=f"Compose the op cards' counter-experiments on the whole {part}; check that the op "
                           "cards' wins add up (op_breakdown per contained card)",
        extra={"id": f"{stage}-{resolution.split('x')[0]}-chunk-{part}-{digest}", "contains": contains,
               "chunk": chunk},
    )
KernelFinder = Callable[[Kernel], "str | None"]


def conv3d_key(input_shape: Sequence[int], weight_shape: Sequence[int], latent_h: int) -> Key | None:
    """A conv3d's place in the decoder: (Cin, Cout, kT, kH, kW, level), None when its H is no latent multiple.

    The decoder's causal convs pad with F.pad and convolve unpadded at stride 1, so the output H is the
    input's H less kH - 1, and that is latent_h * 2**level.
    """
    if len(input_shape) != 5 or len(weight_shape) != 5 or latent_h < 1:
        return None
    out_h = int(input_shape[3]) - (int(weight_shape[3]) - 1)
    ratio = out_h / latent_h
    if ratio < 1 or not ratio.is_integer() or int(ratio) & (int(ratio) - 1):
        return None
    return (int(input_shape[1]), int(weight_shape[0]), *(int(k) for k in weight_shape[2:]), int(math.log2(ratio)))


def _latent_h(card: Card) -> int | None:
    latent = ((card.extra.get("workload") or {}).get("shape") or {}).get("latent")
    return int(latent[3]) if isinstance(latent, list) and len(latent) == 5 else None


def _kernel_card(kernel: Kernel, by_key: dict[Key, str], latent_h: int) -> str | None:
    """The contained card a profiled op stands for: it ran within (or is) a convolution whose input and
    weight shapes place it; the CPU profiler names the top-level op of each op (`within`)."""
    op = kernel.extra.get("within") or kernel.name.split("(")[0]
    shapes = kernel.extra.get("within_shapes") or kernel.extra.get("input_shapes") or []
    if "conv" not in op or len(shapes) < 2:
        return None
    key = conv3d_key(shapes[0], shapes[1], latent_h) if all(isinstance(s, list) for s in shapes[:2]) else None
    return by_key.get(key) if key is not None else None


def _vae_kernel_finder(card: Card) -> KernelFinder:
    ops = (card.extra.get("chunk") or {}).get("ops") or {}
    by_key = {tuple(op["key"]): card_id for card_id, op in ops.items()}
    latent_h = _latent_h(card)
    return lambda kernel: _kernel_card(kernel, by_key, latent_h) if latent_h else None


def _dit_kernel_finder(card: Card) -> KernelFinder:
    """For a measured dit_block card: the contained card each profiled kernel stands for (None: other)."""
    ops = (card.extra.get("chunk") or {}).get("ops") or {}
    by_module = {module: cid for cid, op in ops.items() for module in op.get("modules", [])}
    by_role = {op["role"]: cid for cid, op in ops.items() if op.get("kind") == "attention"}
    shape = ((card.extra.get("workload") or {}).get("shape")) or {}
    keys = {shape.get("valid_keys"): "self", shape.get("text_tokens"): "cross"}
    queries = (shape.get("tokens") or 0) * (shape.get("ranks") or 0)

    def find(kernel: Kernel) -> str | None:
        within = kernel.extra.get("within") or kernel.name.split("(")[0]
        if within.startswith(DIT_SCOPE):
            return by_module.get(within[len(DIT_SCOPE):])
        shapes = kernel.extra.get("within_shapes") or kernel.extra.get("input_shapes") or []
        if "attention" not in within or len(shapes) < 2 or not all(len(s or []) == 4 for s in shapes[:2]):
            return None
        if shapes[0][2] != queries:
            return None
        role = keys.get(shapes[1][2])
        return by_role.get(role) if role else None

    return find


def attribute(card: Card) -> dict[str, float]:
    """Name on each kernel of a measured chunk card the contained card it stands for (`extra["report_card"]`);
    return the kernel-duration sums per contained card and `other`, per chunk call."""
    find = _dit_kernel_finder(card) if card.op_kind == DIT_BLOCK else _vae_kernel_finder(card)
    times = {card_id: 0.0 for card_id in card.extra.get("contains") or []}
    times[OTHER] = 0.0
    for kernel in card.kernels:
        found = find(kernel)
        if found is not None:
            kernel.extra["report_card"] = found
        times[found or OTHER] += kernel.metric("dur_us") or 0.0
    return times


def op_breakdown(before: Card, after: Card) -> list[dict[str, Any]]:
    """Per contained card, then `other`: {card, before_us, after_us}, the profiler's kernel-duration sums per
    chunk call; each side's entries add up to its kernel-duration sum."""
    b, a = attribute(before), attribute(after)
    return [{"card": card_id, "before_us": b.get(card_id, 0.0), "after_us": a.get(card_id, 0.0)}
            for card_id in [*(k for k in b if k != OTHER), OTHER]]


def op_speedups(diff_json: str | Path) -> dict[str, float]:
    """Each op card's speedup (baseline / variant, per original call) in an earlier run's diff.json."""
    rows = json.loads(Path(diff_json).read_text()).get("cards") or []
    return {row["card"]: float(row["speedup"]) for row in rows if isinstance(row.get("speedup"), (int, float))}


def predicted_speedup(breakdown: list[dict[str, Any]], speedups: dict[str, float]) -> tuple[float, float]:
    """The chunk's speedup if each contained card sped up as its op card did alone, the rest not at all:
    total before / sum(before_i / speedup_i); and the share of the chunk's time the op results cover."""
    total = sum(entry["before_us"] for entry in breakdown)
    after = sum(entry["before_us"] / speedups.get(entry["card"], 1.0) for entry in breakdown)
    covered = sum(entry["before_us"] for entry in breakdown if entry["card"] in speedups)
    return (total / after if after > 0 else float("nan")), (covered / total if total > 0 else 0.0)


def not_carried_over(breakdown: list[dict[str, Any]], speedups: dict[str, float], band: float) -> list[str]:
    """The contained cards faster alone (beyond the SAME band) but not inside the chunk, each with both ratios."""
    lost = []
    for entry in breakdown:
        alone = speedups.get(entry["card"])
        inside = entry["before_us"] / entry["after_us"] if entry["after_us"] > 0 else None
        if alone is not None and alone > 1.0 + band and (inside is None or inside <= 1.0 + band):
            lost.append(f"{entry['card']} {alone:.2f}x -> " + ("n/a" if inside is None else f"{inside:.2f}x"))
    return lost


def _breakdown_text(breakdown: list[dict[str, Any]]) -> str:
    return ", ".join(f"{entry['card']} {entry['before_us']:.0f} -> {entry['after_us']:.0f}" for entry in breakdown)


def _collapse_over_peak(notes: list[str]) -> list[str]:
    """One line per side for the diff's per-kernel "estimate above peak" notes: a chunk has many small ops
    whose working set fits in the cache, and a note for each would bury the row's other notes."""
    over = {side: [n for n in notes if n.startswith(f"{side}: ") and "an estimate above peak" in n]
            for side in ("before", "after")}
    kept = [n for n in notes if not any(n in flagged for flagged in over.values())]
    return kept + [f"{side}: {len(flagged)} kernels' estimated percentages of peak exceed 100 (small ops whose "
                   "working set fits in the cache): estimates, not measurements"
                   for side, flagged in over.items() if flagged]


def attach_op_breakdowns(diffs: Iterable[Any], outcomes: Iterable[Any], predict_from: Any = None) -> None:
    """On each chunk card's diff row: `op_breakdown` (baseline vs the variant tried) and a note with it; with
    `predict_from` (an earlier run's diff.json, or a list of them), a note with the speedup its op cards
    predict against the one measured."""
    rows = {d.card: d for d in diffs}
    paths = [predict_from] if isinstance(predict_from, (str, Path)) else list(predict_from or [])
    speedups: dict[str, float] = {}
    for path in paths:
        speedups.update(op_speedups(path))
    for outcome in outcomes:
        row = rows.get(outcome.card_id)
        if row is None or outcome.tried is None or outcome.report_card.op_kind not in CHUNK_OP_KINDS:
            continue
        row.op_breakdown = op_breakdown(outcome.baseline, outcome.tried)
        row.notes = _collapse_over_peak(row.notes)
        row.notes.append(f"op breakdown (profiler kernel-duration sums per chunk call, us, before -> after): "
                         f"{_breakdown_text(row.op_breakdown)}")
        if not paths:
            row.notes.append("no speedup predicted from the op cards: give experiment.predict_from=<an op-card "
                             "run's diff.json>, or run the op cards and the chunk card in one experiment=auto run")
            continue
        predicted, covered = predicted_speedup(row.op_breakdown, speedups)
        measured = "n/a" if row.speedup is None else f"{row.speedup:.2f}x"
        found = sum(entry["card"] in speedups for entry in row.op_breakdown)
        row.notes.append(
            f"predicted from the op cards' results in {', '.join(str(p) for p in paths)}: {predicted:.2f}x "
            f"({found} of {len(row.op_breakdown) - 1} op cards measured there, {covered:.0%} of the chunk's "
            f"profiled time; the rest counted unchanged) vs measured {measured}")
        lost = not_carried_over(row.op_breakdown, speedups, row.same_band or 0.0)
        if lost:
            row.notes.append("op cards whose win did not carry over into the chunk (alone -> inside the chunk, "
                             "kernel-duration sums): " + ", ".join(lost))
