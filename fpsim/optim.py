"""Optimizers: ``SGD``, ``Adam``, ``AdamW`` - PyTorch's update rules, rounded as PyTorch rounds.

Without master weights the update happens in each parameter's own format, one rounding per
in-place op, exactly as PyTorch's single-tensor (for-loop) implementations do on a float16
tensor: optimizer state lives in the parameter's format too.  That is the failure the labs
show - an update below half an ulp of the weight is lost, and Adam's second moment (g*g, with
g ~ 1e-4) underflows in float16.

With ``master_weights=True`` (Apex O2 style) the optimizer keeps a float32 copy of every
parameter (``master_params()``), applies the update and keeps its state there, and writes a
freshly rounded copy back into the low-format parameter after each step.

Without masters, ``update_rounding`` says how the new weight is written into the parameter's
format - the two cures Zamirai et al. (2020) found for pure-bfloat16 training.  In each case
``u`` is the update as a float32 number (SGD: ``-lr * g``; Adam: ``-step_size * exp_avg /
denom``, from the state as stored) and ``w`` the weight as stored:

- ``"nearest"`` (default): ``w <- round(w + u)``, to nearest even, one rounding (float32 sum
  first, as PyTorch's ``add_`` / ``addcdiv_`` compute in float32).  An update below half an ulp
  of ``w`` is lost.
- ``"stochastic"``: ``w <- round_stochastic(float32(w + u))``: the float32 sum, then rounded
  up with probability equal to its distance from the lower neighbour in ulps (what torchao's
  bf16 stochastic-rounding optimizers do to the float32 result).  Unbiased: E[w] = w + u, so
  small updates survive on average.  Seeded by ``seed`` (a numpy generator held by the
  optimizer; ``seed=None`` uses fpsim's module generator, reset by ``fpsim.manual_seed``).
- ``"kahan"``: compensated summation with a buffer ``c`` in the parameter's format
  (``state["kahan_comp"]``, starting at 0)::

      y = u - c                    float32, not stored
      t = round(w + y)             the new weight: one rounding into the format
      c = round((t - w) - y)       t - w is exact in float32; the rest rounds once into the format
      w = t

  ``c`` holds (minus) what the rounding of ``t`` lost, and the next step adds it back, so the
  weight follows the exact sum of the updates to within about an ulp.

Both need the update to land in the low format: with ``master_weights=True`` they raise
ValueError.  Only the weight write changes; Adam's moments still round to nearest, and
AdamW's decoupled decay ``w * (1 - lr * wd)`` rounds to nearest before the update.
"""

from __future__ import annotations

import math

import numpy as np

from .checks import check_finite, check_integer, check_seed, is_integer, is_real
from .formats import F32, default_rng, get_format
from .formats.survival import is_float_dtype
from .numerics.scalars import powi
from .optim_state import STORED_PARTS, Stored, get_state_format, rng_from_words, rng_words, stored_entries, stored_state
from .statedict import Problems
from .tensor import Tensor, no_grad, round_result, tensor

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "Muon", "newton_schulz"]


UPDATE_ROUNDINGS = ("nearest", "stochastic", "kahan")


class Optimizer:
    STATE_NAMES: tuple[str, ...] = ()  # the per-parameter state a subclass keeps (all or none of it)

    def __init__(self, params, lr: float, master_weights: bool = False, update_rounding: str = "nearest",
                 seed=None, state_format=None):
        self.state_format = get_state_format(state_format)  # None: the state in the parameter's format
        if isinstance(params, Tensor) or not hasattr(params, "__iter__"):  # PyTorch's rule, and its TypeError
            raise TypeError(f"params must be an iterable of Tensors (model.parameters()), got {type(params).__name__}")
        self.params: list[Tensor] = list(params)
        if not self.params:
            raise ValueError("optimizer got an empty parameter list")
        for p in self.params:
            if not isinstance(p, Tensor) or not p.requires_grad:
                raise ValueError("optimizer parameters must be tensors that require grad")
        if not (is_real(lr) and lr > 0 and math.isfinite(lr)):
            raise ValueError(f"learning rate must be a finite number > 0, got {lr!r}")
        self.lr = float(lr)
        self.master_weights = bool(master_weights)
        self.master: list[Tensor] | None = None
        if self.master_weights:
            self.master = [Tensor(p.f32().copy(), F32, requires_grad=True, backend=p.backend, name=p.name)
                           for p in self.params]
        if update_rounding not in UPDATE_ROUNDINGS:
            raise ValueError(f"unknown update_rounding {update_rounding!r}; known: {', '.join(UPDATE_ROUNDINGS)}")
        if update_rounding != "nearest" and self.master_weights:
            raise ValueError(f"update_rounding={update_rounding!r} rounds the update into the parameter's own "
                             "format; with master_weights=True the update lands in float32 instead")
        check_seed(seed)
        self.update_rounding = update_rounding
        self.seed = seed
        # None: formats' module generator (fpsim.manual_seed), as fpsim.cast uses without a seed.
        self._rng = np.random.default_rng(seed) if seed is not None else None
        self.state: list[dict] = [{} for _ in self.params]
        self.step_count = 0

    # -- what the update acts on ---------------------------------------------------------------

    def master_params(self) -> list[Tensor]:
        """The tensors the update is applied to: float32 masters, or the parameters themselves.
        Clip these (after ``GradScaler.unscale_``), as with Apex's ``amp.master_params``."""
        return self.master if self.master is not None else self.params

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None
        for m in self.master or ():
            m.grad = None

    def sync_master_grads(self) -> None:
        """Give each master the float32 value of its parameter's low-format gradient, unless
        something (``GradScaler.unscale_``) already did."""
        if self.master is None:
            return
        for p, m in zip(self.params, self.master):
            if m.grad is None and p.grad is not None:
                g = p.grad.f32()  # a fresh array, unless the gradient is held in float32 already: then copied
                m.grad = Tensor(g.copy() if g is p.grad.data else g, F32, backend=p.backend)

    def step(self) -> None:
        self.step_count += 1
        self.sync_master_grads()
        with no_grad():
            for i, t in enumerate(self.master_params()):
                if t.grad is None:
                    continue
                self._update(t, t.grad.f32(), self.state[i])
                if self.master is not None:
                    p = self.params[i]
                    # a fresh rounding of the master into the model's format (monitors see it)
                    p.data = round_result(t.f32(), p.fmt, p.backend, "master_copy", "update", p.name)
        # The masters' float32 gradients are consumed by the step: left in place, a stale one
        # would be reused after model.zero_grad() + backward (sync skips masters that have one).
        for m in self.master or ():
            m.grad = None

    def _r(self, x32, t: Tensor, what: str):
        """Round an intermediate of the update into the format it is stored in."""
        return round_result(x32, t.fmt, t.backend, f"{type(self).__name__.lower()}.{what}", "update", t.name)

    def _load_state(self, stored, be):
        """A state tensor held in ``state_format``, as float32 on the parameter's backend."""
        return be.asarray(self.state_format.load(stored), be.xp.float32)

    def _store_state(self, x32, t: Tensor, signed: bool):
        """``x32`` written in ``state_format`` (``signed=False``: a non-negative state), seeded by
        the optimizer's generator where the format rounds stochastically."""
        return self.state_format.store(t.backend.to_numpy(x32), signed, rng=self._rng, target=t.name)

    def _update(self, t: Tensor, g, state: dict) -> None:
        raise TypeError(f"{type(self).__name__} defines no update rule")

    def _apply(self, t: Tensor, w, u, state: dict) -> None:
        """Write weight ``w`` (float32 values) plus update ``u`` (float32) into ``t``, rounded as
        ``update_rounding`` says (see the module docstring)."""
        op = f"{type(self).__name__.lower()}.step"
        if self.update_rounding == "nearest":
            t.data = self._r(w + u, t, "step")
        elif self.update_rounding == "stochastic":
            rng = self._rng if self._rng is not None else default_rng()
            t.data = round_result(w + u, t.fmt, t.backend, op, "update", t.name, rounding="stochastic", rng=rng)
        else:
            be = t.backend
            comp = state.get("kahan_comp")
            if comp is None:
                comp = state["kahan_comp"] = Tensor(be.round(be.xp.zeros(t.shape, be.xp.float32), t.fmt), t.fmt,
                                                    backend=be)
            y = u - comp.f32()
            new = self._r(w + y, t, "step")
            comp.data = self._r((be.to_f32(new) - w) - y, t, "kahan_comp")
            t.data = new

    # -- state ----------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Flat name -> array (storage dtype) map: step count, master weights, per-param state.  State
        held in ``state_format``: its name, and each stored tensor as ``state.i.name.codes`` (and
        ``.scales`` / ``.k`` where the format keeps them), the codes bit for bit."""
        out = {"optimizer": type(self).__name__, "step_count": self.step_count}
        if self.state_format is not None:
            out["state_format"] = self.state_format.name
        if self._rng is not None and (self.update_rounding == "stochastic" or self.state_format is not None
                                      and self.state_format.rounding == "stochastic"):
            out["rng_state"] = rng_words(self._rng)  # the draws a resumed run makes next
        for i, t in enumerate(self.master_params()):
            if self.master is not None:
                out[f"master.{i}"] = t.numpy().copy()
            for k, v in self.state[i].items():
                if isinstance(v, Stored):
                    out.update(stored_entries(f"state.{i}.{k}", v))
                else:
                    out[f"state.{i}.{k}"] = v.numpy().copy() if isinstance(v, Tensor) else v
        return out

    def load_state_dict(self, sd: dict) -> None:
        """Restore what ``state_dict`` gave, checking names and shapes before changing anything."""
        want_master = {f"master.{i}": p.shape for i, p in enumerate(self.params)} if self.master else {}
        problems = Problems("optimizer load_state_dict", "optimizer")
        problems.check_keys(sd, required=["step_count", *want_master],
                            allowed=lambda k: k.startswith("state.") or k in ("optimizer", "state_format", "rng_state"))
        for k, s in want_master.items():
            if k in sd:
                problems.check_shape(k, sd[k], s)
        self._check_kind(sd, problems)
        stored = stored_state(sd, self.state_format, [p.shape for p in self.params], problems)
        rng = rng_from_words(sd["rng_state"], "rng_state", problems) if "rng_state" in sd else self._rng
        for k in sd:
            if k.startswith("state."):
                parts = k.split(".")
                if len(parts) == 4 and parts[3] in STORED_PARTS and self.state_format is not None:
                    continue  # checked by stored_state
                if len(parts) != 3 or not parts[1].isdigit() or int(parts[1]) >= len(self.params):
                    problems.unexpected.append(k)
                elif isinstance(sd[k], np.ndarray):
                    problems.check_shape(k, sd[k], self.params[int(parts[1])].shape)
        problems.raise_if_any()
        new_state: list[dict] = [{} for _ in self.params]
        targets = self.master_params()
        for k, v in sd.items():
            if k.startswith("state.") and k.count(".") == 2:
                _, i, name = k.split(".")
                t = targets[int(i)]
                new_state[int(i)][name] = tensor(v, t.fmt, backend=t.backend) if isinstance(v, np.ndarray) else v
        for (i, name), st in stored.items():
            new_state[i][name] = st
        if self.master is not None:
            for i, m in enumerate(self.master):
                m.data = tensor(sd[f"master.{i}"], F32, backend=m.backend).data
        self.state, self._rng = new_state, rng
        self.step_count = int(sd["step_count"])

    def _check_kind(self, sd: dict, problems: Problems) -> None:
        """The state must be this optimizer's: saved by the same type (where the state dict says),
        holding only the state this type keeps, all of it for each parameter that has any."""
        mine = type(self).__name__
        saved = sd.get("optimizer", mine)
        if not isinstance(saved, str) or saved != mine:
            problems.add(f"the state was saved from {saved!r}, this optimizer is {mine}")
            return
        per: dict[str, set] = {}
        for k, v in sd.items():
            i, _, name = k.removeprefix("state.").partition(".")
            if not k.startswith("state."):
                continue
            name, _, part = name.partition(".")  # a part (codes, scales, k) of a state held in state_format
            if part:
                pass  # checked by stored_state
            elif name == "step" and not (is_integer(v) and v >= 0):
                problems.add(f"{k} must be an integer >= 0, got {v!r}")
            elif name != "step" and not (isinstance(v, np.ndarray) and is_float_dtype(v.dtype)):
                problems.add(f"{k} must be an array of floats, got {getattr(v, 'dtype', type(v).__name__)}")
            if name != "kahan_comp":
                per.setdefault(i, set()).add(name)
        for i, names in per.items():
            alien = sorted(names - set(self.STATE_NAMES))
            if alien:
                problems.add(f"state.{i} holds {', '.join(alien)}, which {mine} does not keep "
                             f"(its state: {', '.join(self.STATE_NAMES) or 'none'}; saved from another optimizer?)")
            elif names != set(self.STATE_NAMES):
                problems.add(f"state.{i} lacks {', '.join(sorted(set(self.STATE_NAMES) - names))}")
        if not (is_integer(sd.get("step_count", 0)) and sd.get("step_count", 0) >= 0):
            problems.add(f"step_count must be an integer >= 0, got {sd['step_count']!r}")


class SGD(Optimizer):
    """Stochastic gradient descent with PyTorch's momentum, dampening, Nesterov and weight decay.
    ``update_rounding`` / ``seed``: how ``w - lr * g`` is written back (module docstring)."""

    STATE_NAMES = ("momentum_buffer",)

    def __init__(self, params, lr: float, momentum: float = 0.0, weight_decay: float = 0.0,
                 dampening: float = 0.0, nesterov: bool = False, master_weights: bool = False,
                 update_rounding: str = "nearest", seed=None):
        super().__init__(params, lr, master_weights, update_rounding, seed)
        momentum, weight_decay = check_finite(momentum, "momentum", 0), check_finite(weight_decay, "weight_decay", 0)
        dampening = check_finite(dampening, "dampening")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum needs momentum > 0 and dampening 0")
        self.momentum, self.weight_decay, self.dampening, self.nesterov = momentum, weight_decay, dampening, nesterov

    def _update(self, t, g, state):
        w = t.f32()
        if self.weight_decay:
            g = t.backend.to_f32(self._r(g + self.weight_decay * w, t, "weight_decay"))
        if self.momentum:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = Tensor(self._r(g, t, "momentum"), t.fmt, backend=t.backend)
            else:
                b = buf.backend.to_f32(self._r(buf.f32() * self.momentum, t, "momentum"))
                buf = Tensor(self._r(b + (1 - self.dampening) * g, t, "momentum"), t.fmt, backend=t.backend)
            state["momentum_buffer"] = buf
            g = t.backend.to_f32(self._r(g + self.momentum * buf.f32(), t, "nesterov")) if self.nesterov else buf.f32()
        self._apply(t, w, g * -self.lr, state)  # = -(lr * g) exactly (rounding is symmetric); one pass


class Adam(Optimizer):
    """Adam (Kingma & Ba) as PyTorch's single-tensor implementation computes it, rounding
    every in-place op into the state's format.  ``decoupled`` gives AdamW.
    ``update_rounding`` / ``seed``: how ``w - step_size * exp_avg / denom`` is written back
    (module docstring)."""

    decoupled = False
    STATE_NAMES = ("step", "exp_avg", "exp_avg_sq")

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, master_weights: bool = False, update_rounding: str = "nearest",
                 seed=None, state_format=None):
        super().__init__(params, lr, master_weights, update_rounding, seed, state_format)
        if not isinstance(betas, tuple | list) or len(betas) != 2:
            raise ValueError(f"betas must be a pair (beta1, beta2), got {betas!r}")
        b1, b2 = (check_finite(b, f"betas[{i}]", 0, 1) for i, b in enumerate(betas))
        eps, weight_decay = check_finite(eps, "eps", 0), check_finite(weight_decay, "weight_decay", 0)
        self.betas, self.eps, self.weight_decay = (b1, b2), eps, weight_decay

    def _update(self, t, g, state):
        if self.state_format is not None:
            return self._update_formatted(t, g, state)
        be = t.backend
        xp = be.xp
        f = lambda x: be.to_f32(x)  # noqa: E731
        b1, b2 = self.betas
        if not state:
            state["step"] = 0
            state["exp_avg"] = Tensor(be.round(xp.zeros(t.shape, xp.float32), t.fmt), t.fmt, backend=be)
            state["exp_avg_sq"] = Tensor(be.round(xp.zeros(t.shape, xp.float32), t.fmt), t.fmt, backend=be)
        state["step"] += 1
        step = state["step"]
        w = t.f32()
        if self.weight_decay and self.decoupled:
            w = f(self._r(w * xp.float32(1 - self.lr * self.weight_decay), t, "weight_decay"))
        elif self.weight_decay:
            g = f(self._r(g + xp.float32(self.weight_decay) * w, t, "weight_decay"))
        m, v = state["exp_avg"].f32(), state["exp_avg_sq"].f32()
        # the moments are stored as they were rounded (once, where the hooks see it), not rounded again;
        # each float32 operation as written, in its order, the passes writing into a fresh array of
        # their own (never into m, v, g or anything already handed to the hooks)
        m_new = g - m
        m_new *= xp.float32(1 - b1)
        m_new += m
        state["exp_avg"].data = self._r(m_new, t, "exp_avg")  # m + (1 - b1) (g - m): lerp_(g, 1 - b1)
        v = f(self._r(v * xp.float32(b2), t, "exp_avg_sq"))
        v_new = xp.float32(1 - b2) * g
        v_new *= g
        v_new += v
        state["exp_avg_sq"].data = self._r(v_new, t, "exp_avg_sq")  # v + ((1 - b2) g) g: addcmul_
        m, v = f(state["exp_avg"].data), f(state["exp_avg_sq"].data)
        step_size = self.lr / (1 - powi(b1, step))  # PyTorch: lr / (1 - beta1 ** step); correctly rounded here
        bc2_sqrt = math.sqrt(1 - powi(b2, step))
        denom = f(self._r(xp.sqrt(v), t, "denom"))
        denom = f(self._r(denom / xp.float32(bc2_sqrt), t, "denom"))
        denom = f(self._r(denom + xp.float32(self.eps), t, "denom"))
        with_errs = xp.errstate(divide="ignore", invalid="ignore") if hasattr(xp, "errstate") else _null()
        with with_errs:
            u = m / denom
            u *= xp.float32(-step_size)
            self._apply(t, w, u, state)  # w + (-step_size) (m / denom)

    def _update_formatted(self, t, g, state):
        """The update with the moments in ``state_format`` (``fpsim.optim_state``): read as float32,
        the new moments computed in float32 (the same operations in the same order as above), the
        update taken from them, then each written back in the state format."""
        be = t.backend
        xp = be.xp
        b1, b2 = self.betas
        if not state:
            state["step"] = 0
            state["exp_avg"] = self.state_format.zeros(t.shape, True)
            state["exp_avg_sq"] = self.state_format.zeros(t.shape, False)
        state["step"] += 1
        step = state["step"]
        w = t.f32()
        if self.weight_decay and self.decoupled:
            w = w * xp.float32(1 - self.lr * self.weight_decay)
        elif self.weight_decay:
            g = g + xp.float32(self.weight_decay) * w
        m, v = self._load_state(state["exp_avg"], be), self._load_state(state["exp_avg_sq"], be)
        m = (g - m) * xp.float32(1 - b1) + m
        v = v * xp.float32(b2) + (xp.float32(1 - b2) * g) * g
        state["exp_avg"] = self._store_state(m, t, True)
        state["exp_avg_sq"] = self._store_state(v, t, False)
        step_size = self.lr / (1 - powi(b1, step))
        denom = xp.sqrt(v) / xp.float32(math.sqrt(1 - powi(b2, step))) + xp.float32(self.eps)
        self._apply(t, w, (m / denom) * xp.float32(-step_size), state)


class AdamW(Adam):
    """Adam with decoupled weight decay (default 0.01, as in PyTorch)."""

    decoupled = True

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01, master_weights: bool = False, update_rounding: str = "nearest",
                 seed=None, state_format=None):
        super().__init__(params, lr, betas, eps, weight_decay, master_weights, update_rounding, seed, state_format)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


MUON_COEFFICIENTS = (3.4445, -4.7750, 2.0315)  # Keller Jordan's quintic, as torch.optim.Muon's defaults


def newton_schulz(g32, backend, fmt="bfloat16", coefficients=MUON_COEFFICIENTS, steps: int = 5, eps: float = 1e-7,
                  target: str = ""):
    """torch.optim.Muon's ``_zeropower_via_newtonschulz``: the 2-D float32 ``g32`` orthogonalized
    (about U V^T of its SVD), every intermediate rounded into ``fmt`` (PyTorch: bfloat16) through
    ``round_result``: X = g / max(||g||_F, eps) (transposed when it has more rows than columns),
    then ``steps`` times A = X X^T, B = b A + c A A, X = a X + B X - each product fpsim's matmul
    (exact sums rounded once to float32), each combination in float32, one rounding into ``fmt``.
    Returns the float32 values of the result (in ``fmt``'s grid), in ``g32``'s orientation."""
    fmt = get_format(fmt)
    a, b, c = (np.float32(v) for v in coefficients)
    r = lambda x, what: backend.to_f32(round_result(x, fmt, backend, f"muon.{what}", "update", target))  # noqa: E731
    x = r(g32, "ns_input")
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = backend.xp.ascontiguousarray(x.T)
    norm = r(backend.xp.sqrt(backend.sum(x * x)), "ns_norm")
    x = r(x / max(norm, r(backend.xp.float32(eps), "ns_norm")), "ns_scaled")
    for _ in range(steps):
        gram = r(backend.matmul(x, x.T, fmt, fmt), "ns_gram")
        upd = r(b * gram + c * backend.matmul(gram, gram, fmt, fmt), "ns_gram_update")
        x = r(a * x + backend.matmul(upd, x, fmt, fmt), "ns_step")
    return backend.xp.ascontiguousarray(x.T) if tall else x


class Muon(Optimizer):
    """Muon (Keller Jordan, 2024) as ``torch.optim.Muon`` computes it, for 2-D parameters (PyTorch's
    names and defaults: lr 1e-3, weight_decay 0.1, momentum 0.95, nesterov True, ns_coefficients,
    eps 1e-7, ns_steps 5, adjust_lr_fn None = "original").  Per step, in float32:
    ``buf = buf + (1 - momentum) (g - buf)`` (``lerp_``), the update ``g + momentum (buf - g)``
    with Nesterov (else ``buf``), orthogonalized by :func:`newton_schulz` in ``ns_format``
    (bfloat16, as PyTorch), then ``w = w (1 - lr wd)`` and ``w = w - lr' O`` with ``lr'`` the
    shape-adjusted rate (``"original"``: lr sqrt(max(1, rows / cols)); ``"match_rms_adamw"``:
    0.2 lr sqrt(max(rows, cols))).  The buffer is held in the parameter's format (each write one
    rounding), or in ``state_format`` (``fpsim.optim_state``); ``update_rounding`` / ``seed``
    write the weight as for SGD.  PyTorch's CPU kernels fuse some of these multiply-adds; fpsim
    rounds each operation once (tests/modules/test_muon.py holds the two side by side)."""

    STATE_NAMES = ("momentum_buffer",)

    def __init__(self, params, lr: float = 1e-3, weight_decay: float = 0.1, momentum: float = 0.95,
                 nesterov: bool = True, ns_coefficients=MUON_COEFFICIENTS, eps: float = 1e-7, ns_steps: int = 5,
                 adjust_lr_fn: str | None = None, ns_format: str = "bfloat16", master_weights: bool = False,
                 update_rounding: str = "nearest", seed=None, state_format=None):
        super().__init__(params, lr, master_weights, update_rounding, seed, state_format)
        bad = [p.name or str(i) for i, p in enumerate(self.params) if p.ndim != 2]
        if bad:
            raise ValueError(f"Muon: params must be 2-D matrices; {', '.join(bad[:4])} are not (give them to AdamW)")
        if adjust_lr_fn not in (None, "original", "match_rms_adamw"):
            raise ValueError(f"Muon: adjust_lr_fn must be None, 'original' or 'match_rms_adamw', got {adjust_lr_fn!r}")
        check_integer(ns_steps, "Muon: ns_steps", 0, 99)
        if len(tuple(ns_coefficients)) != 3:
            raise ValueError(f"Muon: ns_coefficients must be three numbers (a, b, c), got {ns_coefficients!r}")
        self.weight_decay, self.momentum = check_finite(weight_decay, "weight_decay", 0), check_finite(momentum,
                                                                                                       "momentum", 0)
        self.nesterov, self.ns_coefficients = bool(nesterov), tuple(float(c) for c in ns_coefficients)
        self.eps, self.ns_steps, self.adjust_lr_fn = check_finite(eps, "eps", 0), int(ns_steps), adjust_lr_fn
        self.ns_format = get_format(ns_format)

    def adjusted_lr(self, shape) -> float:
        """torch's ``_adjust_lr``: the learning rate scaled for a (rows, cols) matrix."""
        rows, cols = shape[:2]
        if self.adjust_lr_fn == "match_rms_adamw":
            return self.lr * 0.2 * math.sqrt(max(rows, cols))
        return self.lr * math.sqrt(max(1, rows / cols))

    def _update(self, t, g, state):
        be, xp = t.backend, t.backend.xp
        mom = xp.float32(self.momentum)
        if self.state_format is not None:
            buf = self._load_state(state["momentum_buffer"], be) if state else xp.zeros(t.shape, xp.float32)
            buf = buf + xp.float32(1 - self.momentum) * (g - buf)
            state["momentum_buffer"] = self._store_state(buf, t, True)
        else:
            old = state["momentum_buffer"].f32() if state else xp.zeros(t.shape, xp.float32)
            stored = self._r(old + xp.float32(1 - self.momentum) * (g - old), t, "momentum_buffer")
            state["momentum_buffer"] = Tensor(stored, t.fmt, backend=be)
            buf = be.to_f32(stored)
        # torch's lerp(g, buf, 0.95): weight >= 0.5, so buf - (buf - g) * (1 - 0.95)
        upd = buf - (buf - g) * (xp.float32(1) - mom) if self.nesterov else buf
        o = newton_schulz(upd, be, self.ns_format, self.ns_coefficients, self.ns_steps, self.eps, t.name)
        w = t.f32()
        if self.weight_decay:
            w = be.to_f32(self._r(w * xp.float32(1 - self.lr * self.weight_decay), t, "weight_decay"))
        self._apply(t, w, o * xp.float32(-self.adjusted_lr(t.shape)), state)
