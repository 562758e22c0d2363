"""Automatic mixed precision: ``autocast``, ``GradScaler`` and ``StaticScaler``.  The API and the numbers are PyTorch's (``torch.autocast``,
``torch.amp.GradScaler``); where fpsim departs from them the docstring says so.

The training step they are made for, in PyTorch's documented order::

    with autocast("float16"):
        loss = loss_fn(model(x), y)          # matmuls in float16, the loss in float32
    scaler.scale(loss).backward()            # loss * S: small gradients stay representable
    scaler.unscale_(opt)                     # grads * float32(1/S); inf/NaN recorded
    clip_grad_norm_(opt.master_params(), 1.0)  # clip the UNscaled gradients
    scaler.step(opt)                         # skipped if the scaled grads held inf/NaN
    scaler.update()                          # back off after an overflow, grow after a clean run
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

from . import ops, state
from .checks import check_integer, is_real
from .formats import F32, Format
from .state import autocast_format
from .statedict import Problems
from .tensor import Tensor, round_result, storage_format

__all__ = ["autocast", "autocast_format", "GradScaler", "StaticScaler", "LOSS_SCALE_SCOPE"]

# The module scope of the scaler's multiply (``GradScaler.scale``), so that monitors and the
# non-finite tracer can tell the gradients of a scaled loss from unscaled ones.
LOSS_SCALE_SCOPE = "loss_scale"

_AUTOCAST_FORMATS = ("float16", "bfloat16")


# ------------------------------------------------------------------------------------ autocast


class autocast(contextlib.ContextDecorator):  # noqa: N801 - PyTorch's name
    """Inside, ops follow PyTorch's CUDA autocast policy for ``dtype`` (float16 or bfloat16).

    - matmul and ``Linear`` round their inputs into ``dtype`` and produce ``dtype``
      (float32 products summed in float32, one rounding);
    - exp, log, pow, sum, mean, softmax, log_softmax and the losses (mse_loss, cross_entropy)
      widen their inputs to float32 and produce float32;
    - everything else (relu, gelu, tanh, add, mul, ...) runs in its inputs' format; mixed
      formats promote to the wider one.

    The casts are ordinary differentiable ops, so a float32 parameter used under autocast gets
    a float32 gradient (holding the value its low-precision copy's gradient had).  Nestable;
    ``enabled=False`` turns autocast off inside; the previous state comes back on exit, also
    after an exception.  Usable as a decorator.
    """

    def __init__(self, dtype="float16", enabled: bool = True):
        fmt = storage_format(dtype, "autocast", "dtype")  # a block format's name: said what it is
        if fmt.name not in _AUTOCAST_FORMATS:
            raise ValueError(f"autocast dtype must be float16 or bfloat16, got {fmt.name} "
                             "(float32 everywhere is autocast(enabled=False))")
        if not isinstance(enabled, bool):
            raise TypeError(f"enabled must be True or False, got {enabled!r}")
        self.fmt: Format = fmt
        self.enabled = enabled
        self._saved: list = []

    def __enter__(self):
        cm = state.autocast_as(self.fmt if self.enabled else None)
        cm.__enter__()
        self._saved.append(cm)
        return self

    def __exit__(self, *exc) -> bool:
        self._saved.pop().__exit__(*exc)
        return False

    def __repr__(self) -> str:
        return f"autocast({self.fmt.name!r}, enabled={self.enabled})"


# ------------------------------------------------------------------------------------ scalers

_READY, _UNSCALED, _STEPPED = "ready", "unscaled", "stepped"
_STATE_KEYS = ("scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker")


def _check_growth(growth_factor) -> float:
    if not is_real(growth_factor) or not (float(growth_factor) > 1.0 and math.isfinite(growth_factor)):
        raise ValueError(f"The growth factor must be > 1.0 (and finite), got {growth_factor!r}")
    return float(growth_factor)


def _check_backoff(backoff_factor) -> float:
    if not is_real(backoff_factor) or not 0.0 < float(backoff_factor) < 1.0:
        raise ValueError(f"The backoff factor must be > 0 and < 1.0, got {backoff_factor!r}")
    return float(backoff_factor)


def _check_interval(growth_interval) -> int:
    return check_integer(growth_interval, "growth_interval", 1)


def _iterable(x) -> bool:
    """An iterable scale() walks into: not a string (whose characters are strings again) or a mapping."""
    return hasattr(x, "__iter__") and not isinstance(x, str | bytes | dict)


def _f32(x: float) -> np.float32:
    """Round a float64 value once to float32 (overflow gives inf, silently)."""
    with np.errstate(over="ignore"):
        return np.float32(x)


class GradScaler:
    """Dynamic loss scaling with PyTorch's API and state machine (``torch.amp.GradScaler``).

    The scale is a float32 number, the growth tracker an int counting consecutive clean
    updates.  Per iteration and per optimizer: ``scale(loss)`` -> ``backward`` ->
    [``unscale_(opt)``] -> ``step(opt)``; then once ``update()``.

    The numbers:

    - ``scale(outputs)`` multiplies by the float32 scale as a constant (in module scope
      ``"loss_scale"``, so monitors show it apart), so the result keeps the output's format:
      a float16 loss of 1.0 times the default 2**16 is already inf (the first-step trap -
      float16's max is 65504).  PyTorch promotes a 0-d float16 loss times its
      0-d float32 scale to float32, but the gradient flowing back into the float16 loss is
      65536 -> inf all the same, so the first steps are skipped either way.
    - ``unscale_(opt)`` multiplies every gradient by ``float32(1 / float64(scale))`` - a
      multiply, not a divide (with a non-power-of-two scale the two differ).  Whether
      inf/NaN was found is decided on the SCALED values.  With master weights
      (``opt.master`` set) each master gets ``grad = float32(p.grad) * inv_scale`` - the
      unscale happens in float32, and the low-format ``p.grad`` keeps its scaled value;
      otherwise ``p.grad`` becomes ``round(float32(p.grad) * inv_scale)`` in its own format
      (op ``"unscale"``, direction ``"backward"``: monitors see it).  PyTorch refuses float16
      gradients here ("Attempting to unscale FP16 gradients"); fpsim allows them so that the
      pure-float16 recipes can be shown failing.  With such gradients and a scale below 1,
      unscaling can itself overflow the gradient's format; as in PyTorch, the check (on the
      scaled values) does not see that.
    - ``step(opt)`` unscales if ``unscale_`` was not called, then calls ``opt.step()`` unless
      that optimizer's gradients held inf/NaN.  Skipped or not, the gradients are left as
      they are (unscaled).  It returns what ``opt.step()`` returned, or None when skipped;
      ``last_step_skipped(opt)`` tells the two apart (fpsim's optimizers return None).
    - ``update()``: if any optimizer's gradients held inf/NaN since the last update,
      ``scale = float32(float64(scale) * backoff_factor)`` (but never below ``min_scale``)
      and the tracker becomes 0 - once per update however many optimizers overflowed.
      Otherwise the tracker counts up; when it reaches ``growth_interval``,
      ``scale = float32(float64(scale) * growth_factor)`` if that is finite in float32 (else
      the scale is kept) and the tracker becomes 0 either way.  ``update(new_scale)`` sets the
      scale (rounded to float32) and leaves the tracker alone.

    ``min_scale`` - where fpsim departs from PyTorch.  PyTorch's scale has no floor: 150
    backoffs from 1.0 reach 0.0, after which unscaling multiplies by 1/0 = inf, the zero
    scaled gradients become 0 * inf = NaN while the inf check (which looked at the zeros)
    passes, so the parameters turn NaN and the scale stays 0 for good.  fpsim stops the backoff
    at ``min_scale`` (like Apex's ``min_loss_scale``); steps whose gradients hold inf/NaN are
    still skipped there, so the parameters never go NaN this way.  The default 2**-24 is
    float16's smallest subnormal: below it, scaling rounds every float16 value of magnitude
    below about 0.5 to zero, so no useful scale lives there; it is a power of two with an
    exact, finite float32 reciprocal (2**24); and from the default 2**16 it takes 40
    consecutive overflows to get there - a run that does is broken, not calibrating.
    ``min_scale=0.0`` gives PyTorch's behaviour exactly (the tests check both).

    ``enabled=False``: ``scale`` returns its input, ``unscale_`` and ``update`` do nothing,
    ``step`` just steps, ``get_scale()`` is 1.0, ``state_dict()`` is ``{}``.

    Errors as in PyTorch: ``unscale_`` twice, or after ``step``, before ``update`` raises
    RuntimeError; so does a second ``step``, ``update()`` with no inf check recorded, and
    ``unscale_`` / ``step`` / ``update`` before the first ``scale`` (PyTorch raises
    AssertionError for the last two kinds).  Bad constructor arguments raise ValueError
    (PyTorch: AssertionError).
    """

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True, min_scale: float = 2.0**-24):
        if not isinstance(enabled, bool):
            raise TypeError(f"enabled must be True or False, got {enabled!r}")
        if not is_real(init_scale) or not (float(init_scale) > 0 and math.isfinite(init_scale)):
            raise ValueError(f"init_scale must be a finite number > 0, got {init_scale!r}")
        if not is_real(min_scale) or not (float(min_scale) >= 0 and math.isfinite(min_scale)):
            raise ValueError(f"min_scale must be a finite number >= 0, got {min_scale!r}")
        if float(min_scale) > float(init_scale):
            raise ValueError(f"init_scale {init_scale!r} is below min_scale {min_scale!r}")
        self._enabled = enabled
        self._init_scale = float(init_scale)
        self._growth_factor = _check_growth(growth_factor)
        self._backoff_factor = _check_backoff(backoff_factor)
        self._growth_interval = _check_interval(growth_interval)
        self.min_scale = float(min_scale)
        self._init_growth_tracker = 0
        # Like PyTorch, the scale and tracker come to life at the first scale() call.
        self._scale: np.float32 | None = None
        self._growth_tracker: int | None = None
        self._per_optimizer_states: dict[int, dict] = {}
        self._last_skipped: dict[int, bool] = {}

    # -- the training-step API -----------------------------------------------------------

    def scale(self, outputs):
        """``outputs * scale`` for a Tensor, or for every Tensor of a (nested) iterable of them, as
        PyTorch's does: lists and tuples (named tuples too) come back as the same type with the same
        nesting, ``(t, (t, t), [t, (t, t)])`` included; any other iterable as a list (PyTorch: a lazy
        ``map``; a list here, so that a bad element is refused now).  Each result keeps its output's
        format."""
        if not self._enabled:
            return outputs
        if self._scale is None:
            self._scale = np.float32(self._init_scale)
            self._growth_tracker = self._init_growth_tracker
        if not isinstance(outputs, Tensor) and not _iterable(outputs):
            raise ValueError(f"outputs must be a Tensor or an iterable of Tensors, got {type(outputs).__name__}")
        return self._scaled(outputs)

    def _scaled(self, val):
        if isinstance(val, Tensor):
            with state.scope(LOSS_SCALE_SCOPE):
                return ops.mul(val, self._scale)
        if not _iterable(val):
            raise ValueError(f"outputs must be a Tensor or an iterable of Tensors; found a {type(val).__name__}")
        out = [self._scaled(v) for v in val]
        if isinstance(val, tuple) and hasattr(val, "_fields"):  # a named tuple takes its fields one by one
            return type(val)(*out)
        return type(val)(out) if isinstance(val, list | tuple) else out

    def unscale_(self, optimizer) -> None:
        """Multiply ``optimizer``'s gradients by float32(1/float64(scale)) and record whether
        the scaled gradients held inf/NaN (see the class docstring for where they land)."""
        if not self._enabled:
            return
        self._check_started("unscale_")
        state = self._state(optimizer)
        if state["stage"] == _UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stage"] == _STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        with np.errstate(divide="ignore", over="ignore"):  # scale <= 2^-128 (min_scale=0): inf, as in PyTorch
            inv_scale = np.float32(1.0 / np.float64(self._scale))
        state["found_inf"] = self._unscale_grads(optimizer, inv_scale)
        state["stage"] = _UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """Unscale (unless done), then ``optimizer.step(*args, **kwargs)`` unless the scaled
        gradients held inf/NaN.  Returns what ``optimizer.step`` returned, None if skipped."""
        if not self._enabled:
            self._last_skipped[id(optimizer)] = False
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        self._check_started("step")
        state = self._state(optimizer)
        if state["stage"] == _STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] == _READY:
            self.unscale_(optimizer)
        if state["found_inf"] is None:
            raise RuntimeError("No inf checks were recorded for this optimizer: none of its parameters has a "
                               "gradient. Call backward() on the scaled loss first.")
        retval = None
        if not state["found_inf"]:
            retval = optimizer.step(*args, **kwargs)
        state["stage"] = _STEPPED
        self._last_skipped[id(optimizer)] = state["found_inf"]
        return retval

    def update(self, new_scale=None) -> None:
        """Back off or grow the scale from the inf checks recorded since the last update (or
        set it to ``new_scale``), and start a new iteration."""
        if not self._enabled:
            return
        self._check_started("update")
        if new_scale is not None:
            self._scale = np.float32(self._checked_new_scale(new_scale))
        else:
            found = [s["found_inf"] for s in self._per_optimizer_states.values() if s["found_inf"] is not None]
            if not found:
                raise RuntimeError("No inf checks were recorded prior to update(): call step(optimizer) (or "
                                   "unscale_(optimizer)) for each optimizer first.")
            self._apply_rule(any(found))
        self._per_optimizer_states = {}

    def last_step_skipped(self, optimizer) -> bool:
        """Whether the most recent ``step(optimizer)`` skipped ``optimizer.step()`` because the
        gradients held inf/NaN (an fpsim addition; it survives ``update()``)."""
        if id(optimizer) not in self._last_skipped:
            raise ValueError("step() was never called with this optimizer")
        return self._last_skipped[id(optimizer)]

    # -- the rule --------------------------------------------------------------------------

    def _apply_rule(self, found_inf: bool) -> None:
        """PyTorch's ``_amp_update_scale_``: float32 scale times a float64 factor, rounded
        to float32; plus fpsim's floor at ``min_scale``."""
        if found_inf:
            s = _f32(float(self._scale) * self._backoff_factor)
            self._scale = max(s, np.float32(self.min_scale))
            self._growth_tracker = 0
        else:
            t = self._growth_tracker + 1
            if t == self._growth_interval:
                s = _f32(float(self._scale) * self._growth_factor)
                if np.isfinite(s):
                    self._scale = s
                self._growth_tracker = 0
            else:
                self._growth_tracker = t

    def _unscale_grads(self, optimizer, inv_scale: np.float32) -> bool | None:
        """Unscale every gradient of ``optimizer``; True/False: inf/NaN found in the scaled
        values; None: no parameter had a gradient (no check recorded)."""
        params = getattr(optimizer, "params", None)
        if params is None:
            raise TypeError(f"expected an fpsim optimizer (with .params), got {type(optimizer).__name__}")
        masters = getattr(optimizer, "master", None)
        pairs = zip(params, masters) if masters is not None else ((p, None) for p in params)
        found = None
        for p, m in pairs:
            if p.grad is None:
                continue
            be = p.backend
            # float32(grad) * inv_scale, and whether the scaled gradient held inf / NaN
            u32, bad = be.scaled_f32(p.grad.data, inv_scale)
            found = bool(found) or bad
            if m is not None:  # master weights: one float32 multiply, the low grad keeps its scaled value
                m.grad = Tensor(round_result(u32, F32, be, "unscale", "backward", p.name), F32, backend=be)
            else:
                p.grad.data = round_result(u32, p.grad.fmt, be, "unscale", "backward", p.name)
        return found

    def _checked_new_scale(self, new_scale) -> float:
        if isinstance(new_scale, Tensor):
            if new_scale.size != 1 or new_scale.requires_grad:
                raise ValueError("new_scale must be a number or a one-element Tensor that does not require grad")
            new_scale = new_scale.item()
        if not is_real(new_scale) or not (float(new_scale) > 0 and math.isfinite(new_scale)):
            raise ValueError(f"new_scale must be a finite number > 0, got {new_scale!r}")
        if float(np.float32(new_scale)) < self.min_scale:
            raise ValueError(f"new_scale {new_scale!r} is below min_scale {self.min_scale!r}")
        return float(new_scale)

    def _state(self, optimizer) -> dict:
        return self._per_optimizer_states.setdefault(id(optimizer), {"stage": _READY, "found_inf": None})

    def _check_started(self, funcname: str) -> None:
        if self._scale is None:
            raise RuntimeError(f"Attempted {funcname} but the scale was never used. This may indicate your script "
                               "did not use scaler.scale(loss or outputs) earlier in the iteration.")

    # -- getters, setters, state -----------------------------------------------------------

    def get_scale(self) -> float:
        """The current scale as a Python float (1.0 when disabled)."""
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else float(self._scale)

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = _check_growth(new_factor)

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = _check_backoff(new_factor)

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = _check_interval(new_interval)

    def _get_growth_tracker(self) -> int:
        if not self._enabled:
            return 0
        return self._init_growth_tracker if self._growth_tracker is None else int(self._growth_tracker)

    def is_enabled(self) -> bool:
        return self._enabled

    def state_dict(self) -> dict:
        """PyTorch's five entries (Python float / int), or ``{}`` when disabled.  ``min_scale``
        is a constructor setting and not part of it, so a PyTorch state dict loads here and
        this one loads into PyTorch."""
        if not self._enabled:
            return {}
        return {
            "scale": self.get_scale(),
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": self._get_growth_tracker(),
        }

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore :meth:`state_dict`'s entries.  Does nothing when disabled.  An empty dict
        raises RuntimeError (as in PyTorch: it came from a disabled scaler); missing,
        unexpected or invalid entries raise ValueError, and then nothing has changed."""
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved from a disabled "
                               "instance of GradScaler.")
        vals = self._checked_state(state_dict)
        self._growth_factor = vals["growth_factor"]
        self._backoff_factor = vals["backoff_factor"]
        self._growth_interval = vals["growth_interval"]
        self._set_scale_and_tracker(vals["scale"], vals["_growth_tracker"])

    def _checked_state(self, sd: dict) -> dict:
        problems = Problems("GradScaler state dict", "scaler")
        problems.check_keys(sd, required=_STATE_KEYS)
        problems.raise_if_any()
        try:
            scale = sd["scale"]
            if not is_real(scale) or not (float(scale) >= 0 and math.isfinite(scale)):
                raise ValueError(f"scale must be a finite number >= 0, got {scale!r}")
            if float(scale) < self.min_scale:
                raise ValueError(f"scale {scale!r} is below this scaler's min_scale {self.min_scale!r} "
                                 "(construct it with min_scale=0.0 to load it)")
            tracker = sd["_growth_tracker"]
            check_integer(tracker, "_growth_tracker", 0)
            return {"scale": float(scale), "_growth_tracker": int(tracker),
                    "growth_factor": _check_growth(sd["growth_factor"]),
                    "backoff_factor": _check_backoff(sd["backoff_factor"]),
                    "growth_interval": _check_interval(sd["growth_interval"])}
        except ValueError as e:
            problems.add(str(e))
            raise ValueError(problems.message()) from None

    def _set_scale_and_tracker(self, scale: float, tracker: int) -> None:
        self._init_scale = scale
        self._init_growth_tracker = tracker
        if self._scale is not None:
            self._scale = np.float32(scale)
            self._growth_tracker = tracker

    def __repr__(self) -> str:
        if not self._enabled:
            return f"{type(self).__name__}(enabled=False)"
        return (f"{type(self).__name__}(scale={self.get_scale()!r}, growth_tracker={self._get_growth_tracker()}, "
                f"growth_factor={self._growth_factor}, backoff_factor={self._backoff_factor}, "
                f"growth_interval={self._growth_interval}, min_scale={self.min_scale!r})")


class StaticScaler(GradScaler):
    """A fixed loss scale with GradScaler's API: ``scale``, ``unscale_``, ``step``,
    ``update``, ``state_dict`` work as there, but ``update()`` never changes the scale (and
    the growth tracker stays 0).  Steps whose scaled gradients hold inf/NaN are STILL
    skipped - a static scale that is too large shows up as skipped steps, not NaN weights.

    Its growth and backoff factors read 1.0 and cannot be set; ``load_state_dict`` takes the
    scale from a state dict (its own or a GradScaler's - to freeze a scale a dynamic run
    found) and ignores the rest.
    """

    def __init__(self, scale: float = 1024.0, enabled: bool = True):
        super().__init__(init_scale=scale, enabled=enabled, min_scale=0.0)
        self._growth_factor = 1.0
        self._backoff_factor = 1.0

    def _apply_rule(self, found_inf: bool) -> None:
        pass  # static: skipped steps were already skipped; the scale stays

    def _fixed(self, *_):
        raise RuntimeError("a StaticScaler never changes its scale; use GradScaler for dynamic scaling")

    set_growth_factor = set_backoff_factor = set_growth_interval = _fixed

    def load_state_dict(self, state_dict: dict) -> None:
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved from a disabled "
                               "instance of GradScaler.")
        problems = Problems("StaticScaler state dict", "scaler")
        problems.check_keys(state_dict, required=("scale",), allowed=lambda k: k in _STATE_KEYS)
        scale = state_dict.get("scale", 1.0)
        if not is_real(scale) or not (float(scale) > 0 and math.isfinite(scale)):
            problems.add(f"scale must be a finite number > 0, got {scale!r}")
        problems.raise_if_any()
        self._set_scale_and_tracker(float(scale), 0)
