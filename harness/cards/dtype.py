"""A card's dtype and math mode, decided in one place for every experiment and device.

A card is measured as the op the model ran: on a GPU a float32 linear is another kernel (fp32 cuBLAS in place
of a bf16 nvjet GEMM), and attention built in float32 runs the memory-efficient backend in place of
FlashAttention. So the dtype is the card's, from the strongest evidence there is, in this order:

1. `applied`: round 1's dtype once a round adopted a variant (every later round starts from the same inputs);
2. `config`: the user's `workload.dtype` (for a run over a card filter);
3. `captured`: the dtype harness.capture recorded (`shape_parameters.input_dtype`): the model's own op;
4. `kernels`: the card's kernel names (cuDNN/cuBLAS/CUTLASS say `tf32`, `bf16`, `f16`, `e4m3`/`e5m2`,
   `f32...ffma`; FlashAttention kernels and ops take half precision only);
5. `report`: what the report declares for its model (a top-level `precision` list, or a
   `<report>.declared.json` beside it: harness.cards.model.load_report reads either);
6. `experiment default`: the experiment's `workload_dtype`, a guess, said so on the card and in summary.md.

The math mode says whether float32 math may run as TF32 ("tf32"), must not ("ieee"), or is not a float32
question ("native": half precision, integers). TF32 permission follows the evidence: a TF32 kernel name allows
it for the op's library, an `ffma` one forbids it; without evidence torch's default holds for the op kind
(cuDNN convolutions TF32, cuBLAS matmuls IEEE), which is how the report's model ran. TF32 exists on CUDA only: a
card built on a CPU has no math mode to choose ("native"), and its label names none.
Torch-free: the run decides, the worker builds (harness.trial.build) and pins (harness.trial.torch_state).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from typing import Any, Iterable, Mapping, Sequence

from harness.cards.applied import AppliedVariant
from harness.cards.model import PRECISION_KEY
from harness.errors import HarnessError

APPLIED, CONFIG, CAPTURED, KERNELS, REPORT, DEFAULT = (
    "applied", "config", "captured", "kernels", "report", "experiment default")
TF32, IEEE, NATIVE = "tf32", "ieee", "native"
MATH_MODES = (TF32, IEEE, NATIVE)

# How `workload.dtype` and a declaration may name a dtype; "tf32" is float32 with TF32 math.
_DTYPE_NAMES = {
    "float32": "float32", "fp32": "float32", "float": "float32", "tf32": "float32",
    "bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16", "half": "float16",
    "float64": "float64", "fp64": "float64", "uint8": "uint8", "int8": "int8",
    "float8_e4m3fn": "float8_e4m3fn", "e4m3": "float8_e4m3fn", "float8_e5m2": "float8_e5m2", "e5m2": "float8_e5m2",
}
FLASH_OPS = ("flash_attn_v2", "flash_attn_v3")
_CONV_KINDS = ("conv2d", "conv3d")
_MATMUL_KINDS = ("linear", "attention")  # float32 math on cuBLAS (SDPA's math backend too)


class DtypeError(HarnessError):
    """A dtype or a precision declaration that cannot be read; one line, with the fix."""


@dataclass(frozen=True)
class CardDtype:
    """What a card is built in: its dtype, where that came from, its math mode, and the evidence itself."""

    dtype: str
    source: str
    math: str
    evidence: str

    @property
    def guessed(self) -> bool:
        return self.source == DEFAULT

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> CardDtype:
        return cls(str(values["dtype"]), str(values["source"]), str(values["math"]), str(values.get("evidence", "")))

    def line(self, why: bool = True) -> str:
        """'float32, tf32 math (report: the Wan VAE decodes in fp32 ...)'; without `why`, the source alone. A math
        mode is named only where there is one to choose (float32 on CUDA)."""
        math = f", {self.math} math" if self.math != NATIVE else ""
        return f"{self.dtype}{math} ({self.source}: {self.evidence})" if why else f"{self.dtype}{math} ({self.source})"


def dtype_name(text: str, where: str) -> str:
    """The canonical name of a dtype as a user or a declaration wrote it; DtypeError otherwise."""
    name = _DTYPE_NAMES.get(str(text).strip().lower())
    if name is None:
        raise DtypeError(f"{where}: unknown dtype {text!r}; give one of {', '.join(sorted(set(_DTYPE_NAMES)))}")
    return name


# Kernel-name tokens, most specific first: (pattern, dtype, math). A cuDNN/CUTLASS name lists its operand
# types (`bf16bf16_bf16f32`, `tf32f32_tf32f32_f32`, `f32f32_f32f32_f32..._ffma`); the first match decides.
_KERNEL_TOKENS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"e4m3"), "float8_e4m3fn", NATIVE),
    (re.compile(r"e5m2"), "float8_e5m2", NATIVE),
    (re.compile(r"bf16|bfloat16|__nv_bfloat16"), "bfloat16", NATIVE),
    (re.compile(r"(?<![bt])f16|fp16|half|__half"), "float16", NATIVE),
    (re.compile(r"tf32"), "float32", TF32),
    (re.compile(r"ffma|sgemm|f32f32_f32f32|gemm\w*<float\b|cutlassf_f32|_f32_"), "float32", IEEE),
)


def kernel_evidence(op: str, kernel_names: Iterable[str]) -> tuple[str, str, str] | None:
    """(dtype, math, the kernel that says so) from a card's kernel names, dominant first; None without any."""
    for name in kernel_names:
        text = name.lower()
        for pattern, dtype, math in _KERNEL_TOKENS:
            if pattern.search(text):
                return dtype, math, name.split("(")[0].strip()[:80]
    if op in FLASH_OPS:
        # FlashAttention takes fp16 and bf16 only; which of the two, only a declaration tells.
        return "half", NATIVE, f"{op} runs fp16 or bf16 only"
    return None


def _default_math(dtype: str, op_kind: str) -> str:
    """torch's default for float32 (cuDNN convolutions TF32, matmuls IEEE): how the report's model ran."""
    if dtype != "float32" or op_kind not in (*_CONV_KINDS, *_MATMUL_KINDS):
        return NATIVE
    return TF32 if op_kind in _CONV_KINDS else IEEE


@dataclass(frozen=True)
class Declared:
    """One rule of a report's precision declaration: the cards it matches, and their dtype and math."""

    dtype: str
    math: str | None
    stages: tuple[str, ...]
    ops: tuple[str, ...]
    why: str

    def matches(self, stage: str, op: str) -> bool:
        return (not self.stages or stage in self.stages) and (not self.ops or op in self.ops)


def _names(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise DtypeError(f"{where}: must be a name or a list of names")


def parse_declaration(raw: Any, where: str) -> list[Declared]:
    """A report's `precision` list: each entry {stage?, op?, dtype, math?, why?}; the first that matches wins."""
    if not isinstance(raw, list):
        raise DtypeError(f"{where}: '{PRECISION_KEY}' must be a list of {{stage, op, dtype, math, why}} entries")
    rules = []
    for i, entry in enumerate(raw):
        at = f"{where}: {PRECISION_KEY}[{i}]"
        if not isinstance(entry, dict) or "dtype" not in entry:
            raise DtypeError(f"{at}: give at least a dtype, e.g. {{\"stage\": \"dit\", \"dtype\": \"bfloat16\"}}")
        math = entry.get("math")
        if math is not None and math not in MATH_MODES:
            raise DtypeError(f"{at}: math {math!r}: give one of {', '.join(MATH_MODES)}")
        dtype = str(entry["dtype"])
        rules.append(Declared(dtype=dtype_name(dtype, at), math=TF32 if dtype.lower() == "tf32" else math,
                              stages=_names(entry.get("stage"), f"{at}.stage"),
                              ops=_names(entry.get("op"), f"{at}.op"), why=str(entry.get("why") or "declared")))
    return rules


def declared_rules(report_extra: Mapping[str, Any]) -> list[Declared]:
    """The declaration a loaded report carries (none: [])."""
    raw = report_extra.get(PRECISION_KEY)
    return [] if raw is None else parse_declaration(raw, "the report's precision declaration")


def decide(*, stage: str, op: str, op_kind: str, kernel_names: list[str], shape_parameters: Mapping[str, Any],
           applied: Sequence[AppliedVariant], override: str | None, declared: list[Declared],
           experiment_dtype: str, device: str = "cuda") -> CardDtype:
    """The card's dtype and math mode from the strongest evidence (the module's docstring gives the order), for a
    card built on `device`: TF32 is a CUDA math mode, so off CUDA float32 math has none to choose (native)."""
    decided = _decide(stage=stage, op=op, op_kind=op_kind, kernel_names=kernel_names,
                      shape_parameters=shape_parameters, applied=applied, override=override, declared=declared,
                      experiment_dtype=experiment_dtype)
    return decided if device.startswith("cuda") else replace(decided, math=NATIVE)


def _decide(*, stage: str, op: str, op_kind: str, kernel_names: list[str], shape_parameters: Mapping[str, Any],
            applied: Sequence[AppliedVariant], override: str | None, declared: list[Declared],
            experiment_dtype: str) -> CardDtype:
    if applied and applied[0].workload_dtype:
        dtype = applied[0].workload_dtype
        math = applied[0].math or _default_math(dtype, op_kind)
        return CardDtype(dtype, APPLIED, math, f"round 1 ({applied[0].experiment}) built it so")
    if override:
        dtype = dtype_name(override, "workload.dtype")
        math = TF32 if override.lower() == "tf32" else _default_math(dtype, op_kind)
        return CardDtype(dtype, CONFIG, math, f"workload.dtype={override}")
    captured = shape_parameters.get("input_dtype") if isinstance(shape_parameters, Mapping) else None
    if captured:
        dtype = str(captured)
        return CardDtype(dtype, CAPTURED, _default_math(dtype, op_kind), "the captured call's inputs")
    rule = next((r for r in declared if r.matches(stage, op)), None)
    evidence = kernel_evidence(op, kernel_names)
    if evidence is not None:
        dtype, math, said = evidence
        if dtype != "half":
            return CardDtype(dtype, KERNELS, math, said)
        half = rule.dtype if rule is not None and rule.dtype in ("bfloat16", "float16") else "bfloat16"
        why = f"{said}; {rule.why}" if rule is not None else f"{said}; bf16 assumed (no declaration says which)"
        return CardDtype(half, KERNELS, NATIVE, why)
    if rule is not None:
        return CardDtype(rule.dtype, REPORT, rule.math or _default_math(rule.dtype, op_kind), rule.why)
    return CardDtype(experiment_dtype, DEFAULT, _default_math(experiment_dtype, op_kind),
                     "nothing on the card says; set workload.dtype for it (with cards= for these cards)")


def card_dtype(card: Any, *, applied: Sequence[AppliedVariant], override: str | None, declared: list[Declared],
               experiment_dtype: str, device: str = "cuda") -> CardDtype:
    """`decide` for a harness.cards.model.Card built on `device`, its dominant kernel's name first."""
    names = [k.name for k in card.kernels if k.name]
    if card.dominant_kernel and card.dominant_kernel in names:
        names.remove(card.dominant_kernel)
        names.insert(0, card.dominant_kernel)
    return decide(stage=card.stage, op=card.op, op_kind=card.op_kind, kernel_names=names,
                  shape_parameters=card.shape_parameters, applied=applied, override=override, declared=declared,
                  experiment_dtype=experiment_dtype, device=device)


# The torch settings a card's math mode pins (harness.trial.torch_settings' keys), per op kind. TF32 is allowed
# or refused on the library the op runs on; the new fp32_precision tree is set alike, where the build has it.
def tf32_pins(math: str, op_kind: str) -> dict[str, Any]:
    """The settings that hold float32 math to `math` for an op of `op_kind` ({} : torch's defaults do)."""
    if math == NATIVE or op_kind not in (*_CONV_KINDS, *_MATMUL_KINDS):
        return {}  # a chunk or a replayed op runs under torch's defaults, as the model did
    allowed = math == TF32
    if op_kind in _CONV_KINDS:
        return {"cudnn.allow_tf32": allowed, "fp32_precision.cuda.conv": "tf32" if allowed else "ieee"}
    return {"cuda.matmul.allow_tf32": allowed, "float32_matmul_precision": "high" if allowed else "highest",
            "fp32_precision.cuda.matmul": "tf32" if allowed else "none"}
