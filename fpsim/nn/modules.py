"""The module system and the basic layers: ``Module``, ``Linear``, ``Sequential``, ``MLP`` and
the activations.

Parameters are tensors that require grad, assigned as module attributes.  Calling a module
attributes every op inside it to the module's name, so monitors can report per layer.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

from .. import ops
from ..backend import get_backend
from ..checks import check_integer, check_seed
from ..state import pinned_blas, scope
from ..statedict import Problems
from ..tensor import Tensor, block_format_named, move, round_result, storage_format, tensor

__all__ = ["Module", "Linear", "Sequential", "MLP", "ReLU", "Tanh", "Sigmoid", "GELU", "Identity", "ACTIVATIONS"]


def model_format(fmt, owner: str):
    """``fmt`` as a tensor format (its Format), or one ValueError naming ``owner``: a block-scaled
    format's name (mxfp8, nvfp4, ...) is told where block scaling goes - onto a model's Linear
    layers by ``lowp.convert``, not into its parameters (:func:`fpsim.tensor.storage_format`)."""
    try:
        return storage_format(fmt, owner)
    except ValueError as e:
        if block_format_named(fmt) is not None:
            raise
        raise ValueError(f"{owner}: fmt: {e}") from None


def module_rng(rng, seed, owner: str):
    """``rng`` if given (a numpy Generator), else one seeded by ``seed`` (None or an integer >= 0);
    anything else is one error naming ``owner`` and the argument."""
    if rng is not None:
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"{owner}: rng must be a numpy Generator (np.random.default_rng(...)) or None, got "
                            f"{type(rng).__name__} (an integer seed goes in seed=)")
        return rng
    check_seed(seed, f"{owner}: seed")
    return np.random.default_rng(seed)


class Module:
    """Base class: holds parameters (tensors with requires_grad) and child modules."""

    def __init__(self):
        object.__setattr__(self, "_params", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_name", "")
        object.__setattr__(self, "training", True)

    def __setattr__(self, key, value):
        if "_params" not in self.__dict__:
            raise RuntimeError(f"{type(self).__name__}.__init__ must call super().__init__() first")
        if isinstance(value, Module):
            object.__setattr__(value, "_name", key)
            self._modules[key] = value
        elif isinstance(value, Tensor) and value.requires_grad:
            if not value.name:
                value.name = key
            self._params[key] = value
        object.__setattr__(self, key, value)

    def __call__(self, *args, **kwargs):
        with scope(self._name), pinned_blas():  # the products inside run on fpsim's fixed BLAS threads
            return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise TypeError(f"{type(self).__name__} defines no forward()")

    # -- traversal ---------------------------------------------------------------------------

    def named_modules(self, prefix=""):
        yield prefix, self
        for name, m in self._modules.items():
            yield from m.named_modules(f"{prefix}.{name}" if prefix else name)

    def named_parameters(self, prefix=""):
        for mname, m in self.named_modules(prefix):
            for pname, p in m._params.items():
                yield (f"{mname}.{pname}" if mname else pname), p

    def parameters(self):
        return [p for _, p in self.named_parameters()]

    def train(self, mode: bool = True):
        for _, m in self.named_modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def zero_grad(self):
        for p in self.parameters():
            p.grad = None

    # -- formats, backends, state ----------------------------------------------------------

    def to(self, fmt=None, *, backend=None):
        """Convert every parameter in place: round into ``fmt`` and/or move to ``backend``.

        In place, so tensors an optimizer already holds follow along.  Gradients are dropped.
        """
        f = model_format(fmt, f"{type(self).__name__}.to") if fmt is not None else None
        be = get_backend(backend) if backend is not None else None
        for p in self.parameters():
            moved = move(p, be) if be is not None and be is not p.backend else p
            target_fmt = f or p.fmt
            data = moved.data if target_fmt == p.fmt else round_result(moved.f32(), target_fmt, moved.backend, "to",
                                                                       "update", p.name)  # where the hooks see it
            p.data, p.backend, p.fmt, p.grad_fmt, p.grad = data, moved.backend, target_fmt, target_fmt, None
        return self

    def state_dict(self) -> OrderedDict:
        """Parameter name -> numpy array in the parameter's storage dtype."""
        return OrderedDict((n, p.numpy().copy()) for n, p in self.named_parameters())

    def load_state_dict(self, state) -> None:
        """Load arrays by name.  Missing, unexpected or mis-shaped entries raise ValueError
        naming them, and then nothing at all has been changed."""
        params = dict(self.named_parameters())
        problems = Problems("load_state_dict", "model")
        problems.check_keys(state, required=params)
        for name, p in params.items():
            if name in state:
                problems.check_shape(name, state[name], p.shape)
        problems.raise_if_any()
        new = {}
        for n, p in params.items():
            new[n] = tensor(state[n], p.fmt, backend=p.backend).data
        for n, p in params.items():
            p.data = new[n]
            p.grad = None

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._modules.items())
        return f"{type(self).__name__}({inner})"


class Linear(Module):
    """y = x @ W.T + b, with W of shape (out, in) as in PyTorch.

    Initialised as PyTorch does (uniform in +-1/sqrt(in_features) for both W and b), drawn in
    float64 from ``seed`` / ``rng`` and rounded once into ``fmt``.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, fmt="float32",
                 seed=None, rng=None, backend=None):
        super().__init__()
        in_features = check_integer(in_features, "Linear: in_features", 1)
        out_features = check_integer(out_features, "Linear: out_features", 1)
        fmt = model_format(fmt, "Linear")
        rng = module_rng(rng, seed, "Linear")
        bound = 1.0 / math.sqrt(in_features)
        self.in_features, self.out_features = in_features, out_features
        self.weight = tensor(rng.uniform(-bound, bound, (out_features, in_features)), fmt,
                             requires_grad=True, backend=backend, name="weight")
        self.bias = (tensor(rng.uniform(-bound, bound, out_features), fmt, requires_grad=True,
                            backend=backend, name="bias") if bias else None)

    def forward(self, x: Tensor) -> Tensor:
        return ops.linear(x, self.weight, self.bias)

    def __repr__(self) -> str:
        return f"Linear({self.in_features}, {self.out_features}, fmt={self.weight.fmt.name})"


class Sequential(Module):
    """The ``layers`` (fpsim Modules) one after the other, named ``"0"``, ``"1"``, ...; anything
    else is refused naming its place (a number or a function was dropped without a word, and the
    Sequential skipped it)."""

    def __init__(self, *layers: Module):
        super().__init__()
        for i, layer in enumerate(layers):
            if not isinstance(layer, Module):
                raise TypeError(f"{type(self).__name__}: layer {i} must be an fpsim Module (fpsim.nn.Module), got "
                                f"{type(layer).__name__}")
            setattr(self, str(i), layer)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, i) -> Module:
        return list(self._modules.values())[i]

    def __len__(self) -> int:
        return len(self._modules)

    def forward(self, x):
        for layer in self._modules.values():
            x = layer(x)
        return x


class _Activation(Module):
    fn = None

    def forward(self, x):
        return type(self).fn(x)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class ReLU(_Activation):
    fn = staticmethod(ops.relu)


class Tanh(_Activation):
    fn = staticmethod(ops.tanh)


class Sigmoid(_Activation):
    fn = staticmethod(ops.sigmoid)


class GELU(_Activation):
    fn = staticmethod(ops.gelu)


class Identity(Module):
    def forward(self, x):
        return x


ACTIVATIONS = {"relu": ReLU, "tanh": Tanh, "sigmoid": Sigmoid, "gelu": GELU, "identity": Identity}


class MLP(Sequential):
    """Linear layers of the given ``sizes`` with ``activation`` between them (not after the last)."""

    def __init__(self, sizes, activation="relu", *, fmt="float32", seed=0, bias=True, backend=None):
        sizes = list(sizes)
        if len(sizes) < 2:
            raise ValueError(f"MLP needs at least two sizes (input and output), got {sizes}")
        if isinstance(activation, str):
            if activation not in ACTIVATIONS:
                raise ValueError(f"unknown activation {activation!r}; known: {', '.join(ACTIVATIONS)}")
            activation = ACTIVATIONS[activation]
        elif not callable(activation):
            raise TypeError(f"MLP: activation must be a name ({', '.join(ACTIVATIONS)}) or a Module class, got "
                            f"{activation!r}")
        rng = module_rng(None, seed, "MLP")
        layers = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(Linear(a, b, bias, fmt=fmt, rng=rng, backend=backend))
            if i < len(sizes) - 2:
                layers.append(activation())
        super().__init__(*layers)
