"""Is a variant's output right? Every output is held to the workload's float64 reference.

Why not the baseline's output: a variant that agrees with the baseline only shows that both made the
same error, and one absolute tolerance per experiment is either too loose for float32 (a dropped
bias of 1/sqrt(K) passed at 5.9e-3 under 1e-2) or too tight for bf16. So the bound is derived, per
card, from what the computation can honestly get wrong.

The metric is norm-wise: max_rel = max|out - ref| / max|ref| (stable where ref is near zero).

Same precision (a layout, a kernel or tile, batching: anything that keeps the baseline's dtypes). The
baseline's own error e_b (its max_rel against the float64 reference) measures what rounding in that
precision costs on these inputs; another summation order costs the same order of magnitude, so

    feasible iff max_rel <= same_factor * max(e_b, u_out)

u_out, the unit roundoff of the dtype the baseline delivers (2^-24 for float32, 2^-8 for bfloat16, 0
for an integer output such as the uint8 cast, which must be exact), is a floor: a baseline that happens
to be nearly exact must not reject an exact-but-reordered result.

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

A variant that says what it must return (`Prepared.expected`: `calls` original calls' outputs stacked
on dim 0, the first block being the workload's own call, whose inputs are the workload's inputs) is
checked in two steps, since only that first block has a float64 reference:

1. the expected output itself: its first block against the reference, by the same-precision rule
   (expected is the baseline op applied to each call); a wrong or mis-shaped expected is infeasible;
2. the output: its first block against the reference, and all of it against expected. By the triangle
   inequality the error of any block against its exact value is at most its distance to expected plus
   expected's own error (measured on the first block), so max_rel is the larger of the first block's
   error and that sum, held to the variant's bound.

The other calls' blocks of expected cannot be checked without their float64 reference: a wrong block
there that the variant reproduces exactly goes unseen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from harness.workloads.base import WorkloadError, dtype_name, parse_dtype

ACCUMULATOR = torch.float32  # what the kernels accumulate lowered-precision products in
_TF32_UNIT_ROUNDOFF = 2.0**-11  # TF32 keeps 10 fraction bits; torch has no dtype for it


class CorrectnessError(ValueError):
    """A correctness rule or precision that cannot be used; one line saying why."""


def unit_roundoff(dtype: torch.dtype | str) -> float:
    """u = half the machine epsilon (round to nearest): 2^-24 float32, 2^-8 bfloat16; 0 for integers."""
    if isinstance(dtype, str) and dtype.strip().lower() in ("tf32", "tfloat32"):
        return _TF32_UNIT_ROUNDOFF
    try:
        parsed = parse_dtype(dtype, "precision")
    except WorkloadError as exc:
        raise CorrectnessError(str(exc)) from None
    if parsed.is_floating_point:
        return float(torch.finfo(parsed).eps) / 2.0
    return 0.0


@dataclass(frozen=True)
class Rule:
    """The experiment's factors (conf/experiment/*.yaml `experiment.correctness`)."""

    same_factor: float
    lowered_factor: float

    def __post_init__(self) -> None:
        for name in ("same_factor", "lowered_factor"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise CorrectnessError(f"experiment.correctness.{name}={value!r}: must be a number > 0")

    @classmethod
    def from_config(cls, section: Mapping[str, Any]) -> Rule:
        return cls(float(section["same_factor"]), float(section["lowered_factor"]))


@dataclass(frozen=True)
class Bound:
    """The largest max_rel accepted, and how it was derived."""

    value: float
    derivation: str  # the formula with its numbers, for the card
    precision: str  # "same", or the lowered dtype's name


@dataclass
class Correctness:
    max_abs: float
    max_rel: float  # max |out - ref| / max |ref| against the float64 reference
    bound: float  # the largest max_rel accepted
    derivation: str  # how the bound was derived
    baseline_error: float | None  # e_b: the baseline's max_rel against the same reference
    precision: str  # "same" or the lowered dtype the variant computes in
    feasible: bool
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float, str]:
    """(max_abs, max_rel, problem); a wrong shape or a non-finite value is a problem with infinite error."""
    if tuple(out.shape) != tuple(ref.shape):
        return math.inf, math.inf, f"output shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    a, b = out.detach().double(), ref.detach().to(device=out.device, dtype=torch.float64)
    if not bool(torch.isfinite(a).all()):
        return math.inf, math.inf, "output has NaN or Inf"
    max_abs = float((a - b).abs().max()) if a.numel() else 0.0
    scale = float(b.abs().max()) if b.numel() else 0.0
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
    """What one card's variants are held to: the rule, and the baseline's error in its own dtype."""

    rule: Rule
    baseline_error: float
    dtype: torch.dtype  # what the baseline delivers: its unit roundoff is the floor
    reduction_length: int

    def bound(self, precision: str | None = None) -> Bound:
        floor = unit_roundoff(self.dtype)
        same = self.rule.same_factor * max(self.baseline_error, floor)
        if precision is None:
            return Bound(same, f"same precision: {self.rule.same_factor:g} x max(e_b {self.baseline_error:.3g}, "
                               f"u({dtype_name(self.dtype)}) {floor:.3g}) = {same:.3g}", "same")
        lowered_u, acc_u, k = unit_roundoff(precision), unit_roundoff(ACCUMULATOR), self.reduction_length
        lowered = self.rule.lowered_factor * (lowered_u + math.sqrt(k) * acc_u)
        return Bound(max(same, lowered), f"lowered to {precision}: max(same precision's {same:.3g}, "
                                         f"{self.rule.lowered_factor:g} x (u({precision}) {lowered_u:.3g} + "
                                         f"sqrt(K={k}) x u(float32) {acc_u:.3g}) = {lowered:.3g})", precision)

    def judge(self, output: torch.Tensor, reference: torch.Tensor, *, precision: str | None = None,
              expected: torch.Tensor | None = None, calls: int = 1) -> Correctness:
        """A variant's output against the float64 reference (and its own expected output, if it has one)."""
        bound = self.bound(precision)
        if expected is None:
            return check_output(output, reference, bound, self.baseline_error)
        return self._judge_expected(output, reference, bound, expected, calls)

    def _judge_expected(self, output: torch.Tensor, reference: torch.Tensor, bound: Bound,
                        expected: torch.Tensor, calls: int) -> Correctness:
        rows = reference.shape[0]  # every op's output has a leading dimension to stack calls on
        want = (calls * rows, *reference.shape[1:])

        def infeasible(max_abs: float, max_rel: float, note: str) -> Correctness:
            return Correctness(max_abs, max_rel, bound.value, bound.derivation, self.baseline_error,
                               bound.precision, False, note)

        if tuple(expected.shape) != want:
            return infeasible(math.inf, math.inf, f"Prepared.expected has shape {tuple(expected.shape)}, not "
                                                  f"{calls} call(s) of {tuple(reference.shape)} stacked on dim 0")
        trusted = check_output(expected[:rows], reference, self.bound(None), self.baseline_error)
        if not trusted.feasible:
            return infeasible(math.inf, math.inf, "Prepared.expected is wrong: its own call's block is off the "
                                                  f"float64 reference by max_rel {trusted.max_rel:.3g} > "
                                                  f"{trusted.bound:.3g} {trusted.note}".rstrip())
        whole_abs, whole_rel, problem = _errors(output, expected)
        if problem:
            return infeasible(math.inf, math.inf, problem.replace("reference", "Prepared.expected"))
        first = check_output(output[:rows], reference, bound)
        max_rel = max(first.max_rel, whole_rel + trusted.max_rel)
        note = (f"all {calls} calls' rows: {whole_rel:.3g} from Prepared.expected + its own error "
                f"{trusted.max_rel:.3g}; the workload's own call: {first.max_rel:.3g} from the reference")
        return Correctness(max(first.max_abs, whole_abs), max_rel, bound.value, bound.derivation,
                           self.baseline_error, bound.precision, max_rel <= bound.value, note)


def judge_baseline(output: torch.Tensor, reference: torch.Tensor, rule: Rule,
                   reduction_length: int) -> tuple[Standard, Correctness]:
    """The baseline's own error e_b against the float64 reference, and the standard it sets for the variants.

    The baseline defines the standard, so it is feasible unless its output is malformed; an e_b beyond
    what its dtype's rounding explains is noted (TF32 or a reduced-precision kernel, or a reference
    that computes another op).
    """
    max_abs, max_rel, problem = _errors(output, reference)
    standard = Standard(rule, max_rel if not problem else math.inf, output.dtype, int(reduction_length))
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
