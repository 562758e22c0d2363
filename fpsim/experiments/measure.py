"""What the training loop measures beside the loss: gradients flushed to zero
(:class:`FlushCounter`, a rounding hook), which steps are measured (:func:`measured_steps`), and
where a run died (:func:`diagnose`, the one definition of "the step a run died at")."""

from __future__ import annotations

import math

from .. import state
from ..formats import bits_view
from ..optim import Adam

__all__ = ["FlushCounter", "measured_steps", "diagnose"]


class FlushCounter:
    """A rounding hook (one :class:`~fpsim.state.RoundingEvent` per call): of the backward
    gradients float32 had non-zero, how many became 0 - ``act`` for the gradients flowing
    between layers, ``weight`` for weight and bias gradients, each ``[lost, non-zero]``.

    Cheap enough to run at every step: a rounding never turns 0 into anything else, so the
    lost values are the zeros stored minus the zeros float32 had, two counts per
    event (float16 / bfloat16 / fp8 zeros counted on the bit patterns, not in slow float16
    arithmetic).  The counts stay on the tensors' device (0-d arrays on cupy) until read.
    """

    def __init__(self):
        self.act = [0, 0]
        self.weight = [0, 0]

    def __call__(self, ev: state.RoundingEvent) -> None:
        if ev.direction != "backward" or ev.fmt.name == "float32" or ev.op == "accumulate":
            return
        xp = ev.backend.xp
        if ev.exact32 is None:  # a gradient moved, not rounded (tensor.Exact): nothing lost
            n_nz, lost = _count_nonzero(xp, ev.stored), 0
        else:
            n_nz = _count_nonzero(xp, ev.exact32)
            lost = n_nz - _count_nonzero(xp, ev.stored)
        bucket = self.weight if ev.target in ("weight", "bias") else self.act
        bucket[0] = bucket[0] + lost
        bucket[1] = bucket[1] + n_nz

    @staticmethod
    def fraction(bucket) -> float:
        lost, n = int(bucket[0]), int(bucket[1])
        return lost / n if n else 0.0


def _count_nonzero(xp, a):
    """The non-zero entries of ``a`` (+0 and -0 are zero); 16- and 8-bit formats on their bits,
    float32 by counting its zeros (numpy's ``count_nonzero`` of a float32 array is not vectorised:
    about 7x the comparison and the count of its booleans together)."""
    size = a.dtype.itemsize
    if size < 4:
        return xp.count_nonzero(a.view(bits_view(a)) & (0x7FFF if size == 2 else 0x7F))
    return a.size - xp.count_nonzero(a == 0)


def measured_steps(measure_at, steps: int) -> set[int]:
    """The steps whose gradients are measured: ``"all"``, or a list of steps (negative ones count
    from the end)."""
    if isinstance(measure_at, str):
        if measure_at != "all":
            raise ValueError(f"measure_at: 'all' or a list of steps, got {measure_at!r}")
        return set(range(steps))
    return {s % steps for s in measure_at}


def diagnose(model, opt, step: int, loss: float, loss_kills: bool = True) -> str:
    """Why the run is dead after ``step``, or "": a parameter became non-finite (which ones; for
    Adam without masters, whether ``exp_avg_sq`` had flushed to 0), or - where ``loss_kills`` -
    the loss itself was not finite (forward overflow)."""
    named = list(model.named_parameters())
    if not named:
        return ""
    be = named[0][1].backend  # one device -> host copy for all parameters, not one each
    finite = be.to_numpy(be.xp.stack([be.xp.isfinite(p.f32()).all() for _, p in named]))
    bad = [n for (n, _), ok in zip(named, finite) if not ok]
    if bad:
        why = ""
        if opt.master is None and isinstance(opt, Adam):
            zeros = [n for (n, _), st in zip(named, opt.state)
                     if st and float((st["exp_avg_sq"].f32() == 0).mean()) > 0]
            if zeros:
                why = f"; Adam's exp_avg_sq had entries flushed to 0 in {', '.join(zeros[:3])} (denominator -> 0)"
        return f"step {step}: parameters {', '.join(bad[:4])} became non-finite in the optimizer update{why}"
    if loss_kills and not math.isfinite(loss):
        return f"step {step}: the loss itself was {loss} (forward overflow)"
    return ""
