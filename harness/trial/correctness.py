"""Is a variant's output right? Every output is held to the workload's float64 reference.

Why not the baseline's output: a variant that agrees with the baseline only shows that both made the
same error, and one absolute tolerance per experiment is either too loose for float32 (a dropped
bias of 1/sqrt(K) passed at 5.9e-3 under 1e-2) or too tight for bf16. So the bound is derived, per
card, from what the computation can honestly get wrong.

The metric is norm-wise: max_rel = max|out - ref| / max|ref| (stable where ref is near zero).

Same precision (a layout, a kernel or tile, batching: anything that keeps the baseline's dtypes). The
baseline's own error e_b (its max_rel against the float64 reference) measures what rounding in that
precision costs on these inputs; another summation order costs the same order of magnitude, so

    feasible iff max_rel <= same_factor * max(e_b, u_out, sqrt(K) * u_acc)

u_out, the unit roundoff of the dtype the baseline delivers (2^-24 for float32, 2^-8 for bfloat16, 0
for an integer output such as the uint8 cast, which must be exact), is a floor: a baseline that happens
to be nearly exact must not reject an exact-but-reordered result. So is sqrt(K) * u_acc (u_acc: the
finer of u_out and float32's, the accumulator of the model below; not for an integer output): another
order of the same K-term sums errs by about that much, whatever the baseline's order happened to cost.
Measured: oneDNN's channels_last_3d conv3d (K=2592, float32) errs 1.6e-6 where the NCDHW baseline errs
3.8e-7 on one AVX-512 CPU, over 4 x e_b; sqrt(K) * u_acc is 3.0e-6. A planted bug errs by 1e-2 or more.

Lowered precision (a variant that declares `Prepared.precision`, the dtype it computes in). A model of
a dot product of length K whose inputs are rounded to that dtype (unit roundoff u_p) and summed in a
float32 accumulator, as tensor cores, oneDNN and the SDPA kernels do:

- input rounding: every product x_i w_i gets a relative error of at most 2 u_p, independent between
  terms, so the sum's error has a standard deviation of about u_p * sqrt(2/3) * rms(terms) * sqrt(K)
  while the sum itself is about rms(terms) * sqrt(K): a relative error of order u_p, whatever K is
  (the norm-wise metric compares the largest error with the largest value, both about as many standard
  deviations out);
- output rounding to the lowered dtype: at most u_p of an element, so at most u_p of max|ref|;
- accumulation in float32: with terms of random sign the partial sum after k terms is about sqrt(k)
  rms(terms), and the independent roundings of K additions add to about u_acc * sqrt(K/6) relative to
  the result; the bound takes u_acc * sqrt(K) (u_acc = 2^-24). This is the only K-dependent term: with
  a float32 accumulator it stays small (7e-6 at K=13824), and it is what dominates when a kernel sums
  in the lowered dtype itself (about u_p * sqrt(K/6) = 0.19 for bf16 at K=13824, measured 0.11-0.15):
  rejected, as it should be.

So an honest lowered variant has max_rel of about 1-2 u_p, and

    feasible iff max_rel <= max(same bound, lowered_factor * (u_p + sqrt(K) * u_acc))

The same bound is the floor: lowering cannot be asked to do better than the baseline's own precision.
K is `Workload.reduction_length` (linear K, conv3d Cin/groups*kT*kH*kW, attention the valid keys).
A planted bug (a dropped bias, a transposed weight, a wrong block of rows, a key range off by a block)
errs by 10% or more of max|ref| on these inputs; bf16's lowered bound at factor 4 is 1.6%.

A declaration alone is not trusted: an fp32 linear that drops the last 2 of K=13824 terms and declares
bfloat16 errs by 0.0137, under that 1.6%. So a lowered variant is judged in two more steps
(harness.trial.precision has the means):

1. Evidence it cannot write itself: its call, run once under a dispatch mode that sees every aten op,
   computes in the declared dtype (a cast into it counts: the Triton and CuPy kernels it feeds are
   invisible there), or its output is in that dtype; TF32, a math mode, needs an op on CUDA on float32
   tensors while torch allowed TF32. Without evidence the declaration is ignored: the variant is held
   to the same-precision bound, and the note says so.
2. The emulated reference: the op's float64 reference on the workload's inputs rounded to the declared
   precision, summed exactly, and rounded as the variant's output is (to bf16/fp16 when the output is
   in that dtype, or when every value of a float32 output lies on that grid: a bf16 result returned as
   .float()). An honest kernel differs from it only by
   - its accumulation: a float32 accumulator errs on the rounded products as the original op's float32
     kernel errs on its own, e_b (the same bound is the floor), or, in another order or blocking, by
     about sqrt(K) u_acc of the result (the model above);
   - when both round the output: two values closer than one step of the lowered grid round to the same
     point or to adjacent ones, at most one step, 2 u_p 2^e <= 2 u_p |y| <= 2 u_p max|ref| for y in
     [2^e, 2^(e+1)); so u_p counts once, and emulated_factor 2 admits exactly one step at the largest
     element;
   - for TF32, the kernel's own conversion of each input (cuBLAS rounds ties away from zero, a tensor
     core fed float32 registers truncates): within one TF32 step of the emulation's, up to u_tf32 of
     the result.
   So, norm-wise like max_rel (max|out - emulated| / max|emulated|),

       feasible iff max_rel(emulated) <= max(same bound, emulated_factor * (u_c + u_r + sqrt(K) * u_acc))

   with u_r = u_p when the output is rounded to the lowered dtype, else 0, and u_c = u_tf32 for TF32,
   else 0 (bf16 and fp16 inputs are rounded by torch's cast, to nearest even as the emulation). Norm-wise,
   not per element: a kernel's intermediate roundings (flash attention's probabilities rounded to bf16
   for the PV product, bf16 split-K partials) flip the last bits of small elements by several of their
   own steps (7 on the CPU's bf16 conv3d 384->384), far below one step of max|ref| (0.6 u_p there; flash
   attention over 4680 keys: 0.7-1.5 u_p). The dropped terms above are 2.4-3.3 u_p off it at bf16 output
   (seeds 0-5, 8 x 64 outputs), over 600 times its bound at float32 output.

   The float64 check with the lowered bound still applies: the emulated check shows that the variant
   computes what it declares, the float64 one that this precision is good enough for this op on these
   inputs (an exact bf16 computation of a cancelling sum is far from the float64 result, and the
   emulated check alone would accept it). max_rel and bound are the float64 check's unless the emulated
   check fails; the note gives both. A chunk (vae_decode, dit_block) has no emulated reference (its
   modules' weights and every op in between round too): the float64 check stands alone, noted.

Rounds: round N's adopted variant is round N+1's baseline. Had its own error set round N+1's bound,
the tolerance would compound (0.0137 -> 0.0548 -> 0.139). So e_b is always the original op's error
(the workload's own run(), the card's op as the report ran it, measured each round: judge_baseline on
its output, anchored_standard), never an adopted variant's, and the coarsest precision adopted on the
card so far applies to every variant of the round, its baseline (the adopted variant) included, as if
it declared it: round 2's and round 3's bounds are round 1's.

A variant that batches k original calls (`Prepared(calls=k)`) computes the k calls the harness built
(`w.calls(k)`, harness.workloads.draws): call 0 is the workload's own, the others seeded draws of its
activations over the same constants (a linear's rows sharing its weight, a conv3d's streaming frame
windows), and every call has its own float64 reference. Its output, the k calls' outputs stacked on
dim 0, is judged like any output against those references stacked the same way (`CallBatch.reference()`,
passed as the reference), under the same bound: every call is held to its exact value, so a variant
that computes one call and repeats it, drops a call or misplaces one is infeasible. Nothing the variant
supplies about the other calls is trusted: it names no expected output of its own.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Any, Iterable

import torch

from harness.api.numerics import TF32, precision_name, storage_dtype, unit_roundoff
from harness.boundary.spec import CorrectnessRule
from harness.trial.precision import Observed
from harness.workloads.params import dtype_name

ACCUMULATOR = torch.float32  # what the kernels accumulate lowered-precision products in


def coarsest(precisions: Iterable[str | None]) -> str | None:
    """The lowest of these precisions (the largest unit roundoff), None if none is given: what a card is
    judged at once variants of several precisions were adopted on it."""
    names = [precision_name(p) for p in precisions if p is not None]
    return max(names, key=unit_roundoff) if names else None


@dataclass(frozen=True)
class Bound:
    """The largest max_rel accepted, and how it was derived."""

    value: float
    derivation: str  # the formula with its numbers, for the card
    precision: str  # "same", or the lowered dtype's name


@dataclass
class Correctness:
    max_abs: float
    # max |out - ref| / max |ref| against the float64 reference; for a lowered variant that fails the check
    # against its emulated reference, against that one (the note gives both checks' numbers)
    max_rel: float
    bound: float  # the largest max_rel accepted
    derivation: str  # how the bound was derived
    baseline_error: float | None  # e_b: the baseline's max_rel against the same reference
    precision: str  # "same" or the lowered dtype the variant computes in
    feasible: bool
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


# max |reference| by the reference tensor's identity: a card's variants, draws and rounds are judged against the
# same few references (51 judges of 6 on the default CPU run), and each pass over one costs what the
# difference's does. An entry holds a weak reference and the tensor's version, so a tensor freed (its id then
# free for another) or written in place is measured again; a dead tensor's entry goes with it.
_SCALES: dict[int, tuple[weakref.ref[torch.Tensor], int, float]] = {}


def _scale(ref: torch.Tensor, wide: torch.Tensor) -> float:
    """max |ref|, the unit of max_rel, measured on `wide` (ref widened to float64 on the output's device: the
    same values) once per reference tensor."""
    key = id(ref)
    held = _SCALES.get(key)
    if held is not None and held[0]() is ref and held[1] == ref._version:
        return held[2]

    def forget(_: object) -> None:
        _SCALES.pop(key, None)

    scale = float(torch.linalg.vector_norm(wide, math.inf))
    _SCALES[key] = (weakref.ref(ref, forget), ref._version, scale)
    return scale


def _errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float, str]:
    """(max_abs, max_rel, problem); a wrong shape or a non-finite value is a problem with infinite error."""
    if tuple(out.shape) != tuple(ref.shape):
        return math.inf, math.inf, f"output shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    a, b = out.detach(), ref.detach().to(device=out.device, dtype=torch.float64)
    if not a.numel():
        return 0.0, 0.0, ""
    if not a.is_floating_point():  # bool has no subtraction; a float output is widened exactly by a - b
        a = a.double()
    # Each max in one pass without a temporary (an inf-norm); a NaN or Inf output makes it non-finite, and
    # only then is the output searched for one. Was 4 passes and 2 float64 copies more: 0.09 s a judge on the
    # default conv3d cards' outputs (2.4M elements), 50 judges a run.
    max_abs = float(torch.linalg.vector_norm(a - b, math.inf))
    if not math.isfinite(max_abs) and not bool(torch.isfinite(a).all()):
        return math.inf, math.inf, "output has NaN or Inf"
    scale = _scale(ref, b)
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
    return max_abs, max_rel, ""


def check_output(out: torch.Tensor, ref: torch.Tensor, bound: float | Bound,
                 baseline_error: float | None = None) -> Correctness:
    """`out` against `ref` under one bound; a plain number is a given tolerance (precision "same")."""
    if not isinstance(bound, Bound):
        bound = Bound(float(bound), "given", "same")
    max_abs, max_rel, problem = _errors(out, ref)
    feasible = not problem and max_rel <= bound.value
    return Correctness(max_abs, max_rel, bound.value, bound.derivation, baseline_error, bound.precision,
                       feasible, problem)


@dataclass(frozen=True)
class Standard:
    """What one card's variants are held to: the rule, the original op's error in its own dtype, and the
    precision adopted on the card in earlier rounds (anchored_standard)."""

    rule: CorrectnessRule
    baseline_error: float  # e_b: the original op's max_rel (the card's op as the report ran it), every round
    dtype: torch.dtype  # what the original op delivers: its unit roundoff is the floor
    reduction_length: int
    adopted_precision: str | None = None  # the coarsest precision adopted earlier: every variant is held to it

    def precision_for(self, declared: str | None) -> str | None:
        """The precision a variant is judged at: the coarser of its declaration and the one adopted earlier
        (its inputs, carried from that round, already hold that rounding); None: the same precision."""
        return coarsest((declared, self.adopted_precision))

    def bound(self, precision: str | None = None) -> Bound:
        floor = unit_roundoff(self.dtype)
        # Another order of the same sums (floating outputs only: an integer one must be exact).
        reordered = math.sqrt(self.reduction_length) * min(floor, unit_roundoff(ACCUMULATOR)) if floor else 0.0
        same = self.rule.same_factor * max(self.baseline_error, floor, reordered)
        if precision is None:
            return Bound(same, f"same precision: {self.rule.same_factor:g} x max(e_b {self.baseline_error:.3g}, "
                               f"u({dtype_name(self.dtype)}) {floor:.3g}, sqrt(K={self.reduction_length}) x u_acc "
                               f"{reordered:.3g}) = {same:.3g}", "same")
        lowered_u, acc_u, k = unit_roundoff(precision), unit_roundoff(ACCUMULATOR), self.reduction_length
        lowered = self.rule.lowered_factor * (lowered_u + math.sqrt(k) * acc_u)
        return Bound(max(same, lowered), f"lowered to {precision}: max(same precision's {same:.3g}, "
                                         f"{self.rule.lowered_factor:g} x (u({precision}) {lowered_u:.3g} + "
                                         f"sqrt(K={k}) x u(float32) {acc_u:.3g}) = {lowered:.3g})", precision)

    def emulated_bound(self, precision: str, grid: torch.dtype | None) -> Bound:
        """The largest max_rel accepted against the emulated reference of `precision`, rounded to `grid`
        (the dtype the output is rounded to, None: unrounded)."""
        name, acc_u, k = precision_name(precision), unit_roundoff(ACCUMULATOR), self.reduction_length
        same = self.bound(None)
        # TF32 inputs are converted inside the kernel, in its own rounding mode (cuBLAS rounds ties away
        # from zero, a tensor core fed float32 registers truncates): within one TF32 step of the emulation's.
        conversion_u = unit_roundoff(TF32) if name == TF32 else 0.0
        rounding_u = unit_roundoff(grid) if grid is not None else 0.0
        model = self.rule.emulated_factor * (conversion_u + rounding_u + math.sqrt(k) * acc_u)
        terms = [f"u({TF32} conversion) {conversion_u:.3g}"] if conversion_u else []
        terms += [f"u({dtype_name(grid)} output) {rounding_u:.3g}"] if grid is not None else []
        terms += [f"sqrt(K={k}) x u(float32) {acc_u:.3g}"]
        return Bound(max(same.value, model), f"emulated {name}: max(same precision's {same.value:.3g}, "
                                             f"{self.rule.emulated_factor:g} x ({' + '.join(terms)}) = {model:.3g})",
                     name)

    def judge(self, output: torch.Tensor, reference: torch.Tensor, *, precision: str | None = None,
              emulated: torch.Tensor | None = None, evidence: Observed | None = None) -> Correctness:
        """A variant's output against the float64 reference: the workload's own, or for a variant batching
        k calls the batch's, every call's stacked on dim 0 (CallBatch.reference()).

        precision: the variant's declaration (Prepared.precision); the card's adopted precision applies
        without one (precision_for). emulated: harness.trial.precision.emulated_reference of the same workload
        or batch in the precision judged at, None where it has none (a chunk). evidence:
        harness.trial.precision.observed_precisions of the variant's call; None: its output dtype alone is the
        evidence. A lowered precision without evidence is ignored (judged at the same precision, noted).
        """
        lowered = self.precision_for(precision)
        if lowered is None:
            return check_output(output, reference, self.bound(None), self.baseline_error)
        if output.dtype != storage_dtype(lowered) and not (evidence is not None and evidence.shows(lowered)):
            held = f"declares {lowered}" if precision is not None and precision_name(precision) == lowered else (
                f"is held to {lowered}, adopted on this card in an earlier round,")
            seen = f" ({evidence.describe()})" if evidence is not None else ""
            result = check_output(output, reference, self.bound(None), self.baseline_error)
            result.note = " ".join(filter(None, [
                result.note, f"{held} but neither its output dtype nor any op of its call computes in {lowered}: "
                             f"judged at the baseline's precision{seen}"]))
            return result
        plain = check_output(output, reference, self.bound(lowered), self.baseline_error)
        if emulated is None:
            plain.note = " ".join(filter(None, [plain.note, f"no {lowered}-emulated reference for this op: "
                                                            "checked against the float64 one alone"]))
            return plain
        if plain.note:  # a wrong shape or a non-finite value: nothing more to compare
            return plain
        grid = output_grid(output, lowered)
        target = emulated if grid is None else emulated.to(grid).to(torch.float64)
        emu = check_output(output, target, self.emulated_bound(lowered, grid), self.baseline_error)
        how = f"inputs rounded to {lowered}, summed exactly"
        how += f", output rounded to {dtype_name(grid)}" if grid is not None else ""
        note = "; ".join(f"against the {what} reference{detail}: max_rel {c.max_rel:.3g} "
                         f"{'<=' if c.feasible else '>'} {c.bound:.3g}"
                         for what, detail, c in ((f"{lowered}-emulated", f" ({how})", emu), ("float64", "", plain)))
        decided = plain if emu.feasible else emu  # the pair that says why it is infeasible
        return Correctness(decided.max_abs, decided.max_rel, decided.bound, f"{plain.derivation}; {emu.derivation}",
                           self.baseline_error, lowered, plain.feasible and emu.feasible, note)


def output_grid(output: torch.Tensor, precision: str) -> torch.dtype | None:
    """The lowered dtype `output` is rounded to: its own dtype when that is bf16 or fp16, else the
    precision's storage dtype when every value of a wider output lies on its grid (a bf16 result returned
    as .float(): a float32 result falls on the bf16 grid by chance with probability 2^-16 per element);
    None: not rounded to a lowered dtype."""
    if output.dtype in (torch.bfloat16, torch.float16):
        return output.dtype
    lowered = storage_dtype(precision)
    if lowered is None or not output.is_floating_point() or unit_roundoff(output.dtype) >= unit_roundoff(lowered):
        return None
    return lowered if torch.equal(output, output.to(lowered).to(output.dtype)) else None


def anchored_standard(rule: CorrectnessRule, original_error: float, original_dtype: torch.dtype, reduction_length: int,
                      adopted_precision: str | None = None) -> Standard:
    """The standard of a round: from the original op's error e_orig in its dtype (never an adopted
    variant's), and the coarsest precision adopted on the card in earlier rounds (None: none lowered)."""
    adopted = None if adopted_precision is None else precision_name(adopted_precision)
    return Standard(rule, float(original_error), original_dtype, int(reduction_length), adopted)


def judge_baseline(output: torch.Tensor, reference: torch.Tensor, rule: CorrectnessRule, reduction_length: int,
                   adopted_precision: str | None = None) -> tuple[Standard, Correctness]:
    """The original op's own error e_b against the float64 reference, and the standard it sets for the
    round's variants and its baseline (anchored_standard).

    `output` is the original op's (the workload's own run(): the card's op as the report ran it), in
    every round: from round 2 on the round's baseline is the adopted variant, judged by the standard
    like any variant. The original op defines the standard, so it is feasible unless its output is
    malformed; an e_b beyond what its dtype's rounding explains is noted (TF32 or a reduced-precision
    kernel, or a reference that computes another op).
    """
    max_abs, max_rel, problem = _errors(output, reference)
    standard = anchored_standard(rule, max_rel if not problem else math.inf, output.dtype, reduction_length,
                                 adopted_precision)
    bound = standard.bound(None)
    note = problem
    if not problem:
        explained = rule.lowered_factor * (unit_roundoff(output.dtype)
                                           + math.sqrt(reduction_length) * unit_roundoff(ACCUMULATOR))
        if max_rel > explained:
            note = (f"baseline error {max_rel:.3g} is more than {dtype_name(output.dtype)} rounding explains "
                    f"({explained:.3g}): TF32 or a reduced-precision kernel, or a reference of another op")
    return standard, Correctness(max_abs, max_rel, bound.value, bound.derivation, standard.baseline_error,
                                 "same", not problem, note)
