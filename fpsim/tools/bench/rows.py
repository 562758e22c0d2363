"""``fpsim bench``'s ``Row`` and its step section: training steps held against a peer.

The MLP step (``steps.py``): fpsim under fp32, fp16-dynamic and bf16-master on the numpy
backend, fp16-dynamic and bf16-master once more on ``numpy-f32`` (the same numbers, every
format held in float32 arrays: nothing to widen), and PyTorch CPU float32 and float16
(``model.half()``).  The low-precision steps are held against fpsim's fp32 step on numpy.

The tiny-GPT step: one training step of ``fpsim compare --task tinygpt``'s model (its defaults,
its Adam and loss: ``experiments.tinygpt.training_step``): fpsim's fp32 step against PyTorch
CPU's fp32 step of the same architecture (``torchref.tinygpt``, the same sizes, batch and Adam,
on the same thread count); under fp16-amp, bf16-master, fp8-delayed, mxfp8, nvfp4 and
fp8-hopper against fpsim's fp32 step on numpy, and fp16-amp once more on numpy-f32.

All the steps of one model are timed interleaved in one set of samples, so that every row's
ratio comes from the same rounds.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ...experiments.tinygpt import TinyGPTTask, training_step
from .. import torchref
from .steps import MLP_SIZES, fpsim_step, torch_gpt_step, torch_step, torch_threads
from .timing import median_ratio, time_interleaved

__all__ = ["Row", "compare_row", "STEP_RECIPES", "GPT_RECIPES", "CARRIER", "CARRIER_RECIPES", "step_rows"]

STEP_RECIPES = ("fp32", "fp16-dynamic", "bf16-master")  # on numpy
CARRIER = "numpy-f32"
CARRIER_RECIPES = ("fp16-dynamic", "bf16-master")  # timed on CARRIER as well
# the targets of issue 44 ("emulation at memory speed"), each row judged against its own
_FP16_TARGET = {"target": "<= 1.3x (stretch 1.1x)", "limit": 1.3, "stretch": 1.1}
_TORCH16_TARGET = {"target": ">= 6x faster (<= 0.167x; stretch 10x)", "limit": 1 / 6, "stretch": 0.1}
_BF16_TARGET = {"target": "<= 1.15x", "limit": 1.15}
_FP32_TARGET = {"target": "<= 1.2x (stretch 1.0x)", "limit": 1.2, "stretch": 1.0}
_NO_TORCH = "PyTorch not installed"


@dataclass
class Row:
    """One measurement: ``seconds`` per call of what fpsim does, ``peer_seconds`` of the peer,
    ``ratio`` (fpsim / peer, so below 1 means fpsim is faster) and, where there is a target,
    the largest ratio that meets it (``limit``) and whether it was met."""

    section: str
    name: str
    peer: str
    seconds: float | None = None
    peer_seconds: float | None = None
    ratio: float | None = None
    target: str = ""
    limit: float | None = None
    met: bool | None = None
    note: str = ""
    skipped: str = ""  # why the row was not measured (then every number is None)
    others: dict = field(default_factory=dict)  # further peers: label -> seconds

    def judge(self, stretch: float | None = None) -> Row:
        if self.limit is not None and self.ratio is not None:
            self.met = self.ratio <= self.limit
            if stretch is not None:
                self.note = ("stretch target " if self.ratio <= stretch else "stretch target NOT ") + \
                            f"<= {stretch:g}x met" + (f"; {self.note}" if self.note else "")
        return self


def compare_row(section, name, fn, peer, peer_fn, s, *, repeats=None, target="", limit=None, stretch=None,
            note="") -> Row:
    """A row timing ``fn`` against ``peer_fn`` interleaved (``s``: the run's ``BenchSettings``)."""
    a, b = time_interleaved([fn, peer_fn], repeats or s.repeats, s.warmup, s.min_time)
    row = Row(section, name, peer, statistics.median(a), statistics.median(b), median_ratio(a, b), target,
              limit, note=note)
    return row.judge(stretch)


class _Samples:
    """The interleaved samples of named callables, and the rows held between two of them."""

    def __init__(self, fns: dict, s, groups=None):
        self.samples = dict(zip(fns, time_interleaved(list(fns.values()), s.repeats, s.warmup, s.min_time, groups,
                                                      s.settle)))

    def median(self, key):
        return statistics.median(self.samples[key]) if key in self.samples else None

    def row(self, name, key, peer, peer_key, *, target="", limit=None, stretch=None, note="", skip="") -> Row:
        """``key`` against ``peer_key``; skipped (with ``skip``) when the peer was not timed."""
        if peer_key not in self.samples:
            return Row("step", name, peer, self.median(key), skipped=skip)
        a, b = self.samples[key], self.samples[peer_key]
        return Row("step", name, peer, statistics.median(a), statistics.median(b), median_ratio(a, b), target,
                   limit, note=note).judge(stretch)


def _mlp_rows(s, tick, threads: int) -> list[Row]:
    torch = torchref.import_torch()
    label = f"MLP {'-'.join(map(str, MLP_SIZES))} batch {s.batch} SGD step"
    tick(f"step {label}")
    fns = {r: fpsim_step(r, s.batch, backend="numpy") for r in STEP_RECIPES}
    fns.update({f"{r} [{CARRIER}]": fpsim_step(r, s.batch, backend=CARRIER) for r in CARRIER_RECIPES})
    groups = ["numpy"] * len(fns)
    with torch_threads(torch, threads):
        if torch is not None:
            fns.update({f"torch-{d}": torch_step(torch, d, s.batch) for d in ("float32", "float16")})
            groups += ["torch"] * 2
        t = _Samples(fns, s, groups)
    c = f" [{CARRIER}]"
    return [
        t.row(f"fpsim fp32 {label}", "fp32", "PyTorch CPU float32", "torch-float32", **_FP32_TARGET,
              skip=_NO_TORCH),
        t.row(f"fpsim fp16-dynamic {label}", "fp16-dynamic", "fpsim fp32", "fp32", **_FP16_TARGET),
        t.row(f"fpsim fp16-dynamic {label}{c}", f"fp16-dynamic{c}", "fpsim fp32", "fp32", **_FP16_TARGET),
        t.row(f"fpsim fp16-dynamic {label}", "fp16-dynamic", "PyTorch CPU float16 (model.half())", "torch-float16",
              **_TORCH16_TARGET, skip=_NO_TORCH),
        t.row(f"fpsim fp16-dynamic {label}{c}", f"fp16-dynamic{c}", "PyTorch CPU float16 (model.half())",
              "torch-float16", **_TORCH16_TARGET, skip=_NO_TORCH),
        t.row(f"fpsim bf16-master {label}", "bf16-master", "fpsim fp32", "fp32", **_BF16_TARGET),
        t.row(f"fpsim bf16-master {label}{c}", f"bf16-master{c}", "fpsim fp32", "fp32", **_BF16_TARGET),
        t.row(f"PyTorch CPU float16 {label}", "torch-float16", "PyTorch CPU float32", "torch-float32",
              note="PyTorch's own float16 CPU kernels", skip=_NO_TORCH),
    ]


QUICK_GPT = {"n_digits": 4, "batch": 8, "d_model": 32, "n_layers": 1, "n_heads": 2}  # --quick: a smoke run


def gpt_task(s) -> TinyGPTTask:
    """The tiny GPT the step rows time: ``fpsim compare --task tinygpt``'s defaults, or with
    ``--quick`` a one-layer model on 4 digits (:data:`QUICK_GPT`), where only the plumbing is tested."""
    return TinyGPTTask(**QUICK_GPT) if s.quick else TinyGPTTask()


def gpt_label(task: TinyGPTTask) -> str:
    return (f"tiny GPT ({task.n_layers} layers, d_model {task.d_model}, context {task.context}) "
            f"batch {task.batch} Adam step")


GPT_RECIPES = ("fp16-amp", "bf16-master", "fp8-delayed", "mxfp8", "nvfp4", "fp8-hopper")  # against fp32
_GPT_TARGETS = {"bf16-master": 1.15, "fp8-delayed": 1.3, "mxfp8": 1.3, "nvfp4": 1.5,
                "fp8-hopper": 3.0}
_GPT_NOTES = {"fp16-amp": "autocast + GradScaler, float32 parameters",
              "bf16-master": "bfloat16 weights, activations and gradients, float32 master weights",
              "fp8-delayed": "every Linear in fp8 (e4m3 forward, e5m2 gradients), delayed scaling",
              "mxfp8": "every Linear's GEMM operands in MXFP8 blocks of 32",
              "nvfp4": "NVFP4 GEMMs (16x16 weight tiles, SR gradients, Hadamard), first and last Linear float32",
              "fp8-hopper": "every Linear in fp8 on Hopper's 13-bit truncating accumulator (fpsim.tensorcore)"}


def _gpt_rows(s, tick, threads: int) -> list[Row]:
    """fpsim's fp32 step against PyTorch CPU's (``torch.nn``, same sizes and Adam, same threads);
    each recipe's step against fpsim's fp32 step; fp16-amp once more on numpy-f32."""
    torch = torchref.import_torch()
    task = gpt_task(s)
    label = gpt_label(task)
    tick(f"step {label}")
    fns = {"fp32": training_step("fp32", task, backend="numpy")}
    fns.update({r: training_step(r, task, backend="numpy") for r in GPT_RECIPES})
    fns["fp16-amp-carrier"] = training_step("fp16-amp", task, backend=CARRIER)
    groups = ["numpy"] * len(fns)
    with torch_threads(torch, threads):
        if torch is not None:
            fns["torch-fp32"] = torch_gpt_step(torch, task)
            groups.append("torch")
        t = _Samples(fns, s, groups)
    rows = [t.row(f"fpsim fp32 {label}", "fp32", "PyTorch CPU float32 (torch.nn, same sizes and Adam)", "torch-fp32",
                  **_FP32_TARGET, skip=_NO_TORCH)]
    for r in GPT_RECIPES:
        goal = _FP16_TARGET if r == "fp16-amp" else {"target": f"<= {_GPT_TARGETS[r]:g}x", "limit": _GPT_TARGETS[r]}
        rows.append(t.row(f"fpsim {r} {label}", r, "fpsim fp32", "fp32", **goal, note=_GPT_NOTES[r]))
    rows.insert(2, t.row(f"fpsim fp16-amp {label} [{CARRIER}]", "fp16-amp-carrier", "fpsim fp32", "fp32",
                         **_FP16_TARGET, note=_GPT_NOTES["fp16-amp"]))
    return rows


def step_rows(s, tick, threads: int) -> list[Row]:
    """The step section's rows (``s``: the run's ``BenchSettings``; ``tick`` as each model starts)."""
    return _mlp_rows(s, tick, threads) + _gpt_rows(s, tick, threads)
