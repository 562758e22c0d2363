"""The named training recipes: how one run stores and protects its numbers.

A recipe names the formats of parameters, activations and gradients, whether the optimizer
keeps float32 master weights, and which loss scaler runs:

- ``fp32``          float32 throughout.
- ``fp16-pure``     float16 parameters, activations, gradients AND optimizer state; no cure.
- ``fp16-master``   float16 model, float32 master weights (Apex O2 without loss scaling).
- ``fp16-static``   ... plus a static loss scale (1024).
- ``fp16-dynamic``  ... plus PyTorch's dynamic GradScaler (2**16 start, growth interval 100).
- ``fp16-amp``      float32 parameters under ``autocast("float16")`` with GradScaler: PyTorch's
                    usual AMP (matmuls in float16, losses and reductions in float32).
- ``bf16-pure``     bfloat16 parameters, activations, gradients and optimizer state.
- ``bf16-master``   bfloat16 model with float32 master weights; no scaler (none is needed).

Beyond float16 (``EXTENDED_RECIPES``; ``fpsim compare --recipes ...`` runs them):

- ``fp8-delayed``     float32 parameters (the master weights); every Linear runs in fp8
                      (``fpsim.lowp``): weights and inputs cast to e4m3fn, the gradients to e5m2,
                      each with its own per-tensor scale from an amax history (Transformer
                      Engine's DelayedScaling: history 16, margin 0), saturating casts, float32
                      accumulation; activations between layers and the loss stay float32.  The
                      first step's scales come from its own amaxes (``amax_init=True``, as in
                      torchao's float8), not 1 as in TE: see ``fpsim.lowp.recipes``, "The first step".
- ``fp8-delayed-inner`` the same for the inner Linears only: the first and the last stay float32,
                      as fp8 recipes at scale commonly keep them in higher precision.
- ``fp8-current``     ``fp8-delayed`` with current scaling instead (TE's Float8CurrentScaling:
                      every cast scaled by its own amax, no history, no delay) - the control
                      for what the delay costs (not in ``EXTENDED_RECIPES``; name it).
- ``fp8-hopper``      ``fp8-delayed`` with its three GEMMs accumulated as Hopper's fp8 tensor cores
                      do (``fpsim.tensorcore``: 13 fraction bits, truncated, no promotion) - slow,
                      so name it.
- ``bf16-kahan``      ``bf16-pure`` with Kahan-compensated weight updates (a bfloat16
                      compensation buffer; Zamirai et al. 2020).
- ``bf16-stochastic`` ``bf16-pure`` with the updated weights rounded stochastically into
                      bfloat16 (seeded by the run's seed).

Block-scaled (``BLOCK_RECIPES``): float32 parameters (the master weights); every Linear runs its
three GEMMs on block-quantized operands (``fpsim.lowp.BlockLinear``: each operand in blocks along
that GEMM's reduction axis), float32 accumulation; activations between layers stay float32.

- ``mxfp8``           OCP MXFP8: e4m3 elements, blocks of 32 sharing an e8m0 scale (floor).
- ``mxfp6``           MXFP6: e2m3 for weights and inputs, e3m2 for gradients.
- ``mxfp4``           MXFP4: e2m1 elements, blocks of 32, e8m0 scales.
- ``mxfp4-sr-rht``    ``mxfp4`` with stochastically rounded gradients and a random Hadamard
                      transform of size 16 on the weight-gradient GEMM's operands.
- ``nvfp4``           NVFP4: e2m1 in blocks of 16 with e4m3 block scales and a float32 tensor
                      scale; 16x16 weight tiles; SR on gradients, Hadamard on wgrad; the first and
                      last Linear kept out (in float32 here; NVIDIA's recipe keeps them in bf16).
- ``fp8-blockwise``   DeepSeek-V3 style: e4m3 with float32 power-of-two scales per 1x128 tile
                      (activations, gradients) and per 128x128 tile (weights).
- ``fp8-deepseek``    ``fp8-blockwise`` on Hopper's fp8 tensor cores, each 128 of K a chain whose
                      partial sum is promoted into float32 with its block scales (DeepSeek-V3) -
                      slow, so not in ``BLOCK_RECIPES``; name it.
"""

from __future__ import annotations

import contextlib
import math
import sys
import warnings
from dataclasses import InitVar, dataclass
from functools import partial

from .. import lowp
from ..amp import autocast
from ..checks import check_integer, is_real
from ..lowp import BlockScaling, CurrentScaling, DelayedScaling, ScalingGroup
from ..optim import SGD, UPDATE_ROUNDINGS, Adam
from ..registry import Registry
from ..tensor import storage_format
from .run import Run, make_scaler

__all__ = ["Recipe", "RECIPES", "DEFAULT_RECIPES", "EXTENDED_RECIPES", "BLOCK_RECIPES", "get_recipe"]


class _OldLayerField:
    """A deprecated name of the recipe's layer conversion (``fp8``, ``fp8_skip``, ``block``,
    ``block_skip``, removed 2027-06-01): accepted by the constructor (an ``InitVar`` whose default
    this descriptor gives the dataclass: None) and read as an attribute, with a DeprecationWarning;
    ``fp8`` reads :attr:`Recipe.layers` where it is a per-tensor scaling config, ``block`` where it
    is a :class:`~fpsim.lowp.BlockScaling`, the ``*_skip`` names :attr:`Recipe.layers_skip` alike."""

    def __set_name__(self, owner, name: str):
        self.name = name
        self.kind = BlockScaling if name.startswith("block") else DelayedScaling

    def __get__(self, obj, owner=None):
        if obj is None or sys._getframe(1).f_globals.get("__name__") == "dataclasses":
            # the InitVar's default: dataclasses ask the class for it, and dataclasses.replace asks
            # the instance (a replaced recipe keeps its layers through the fields it copies)
            return None
        new = "layers_skip" if self.name.endswith("_skip") else "layers"
        warnings.warn(f"Recipe.{self.name} is deprecated (removed 2027-06-01): read Recipe.{new}",
                      DeprecationWarning, stacklevel=2)
        mine = isinstance(obj.layers, self.kind)
        if new == "layers_skip":
            return obj.layers_skip if mine else ()
        return obj.layers if mine else None


def _check_fields(r) -> None:
    """One ValueError / TypeError naming the recipe and the field for a field a run could not use
    (a scaler "sometimes" trained with a dynamic scaler, master="yes" took master weights, a params
    format 'nosuch' failed only at the run's first step, naming MLP.to)."""
    own = f"Recipe {r.name!r}"
    if not isinstance(r.name, str) or not r.name:
        raise TypeError(f"Recipe: name must be a non-empty string, got {r.name!r}")
    try:
        storage_format(r.params, own, "params")
    except ValueError as e:
        raise ValueError(str(e) if str(e).startswith(own) else f"{own}: params: {e}") from None
    if not isinstance(r.master, bool):
        raise TypeError(f"{own}: master must be True or False, got {r.master!r}")
    if r.scaler not in (None, "static", "dynamic"):
        raise ValueError(f"{own}: scaler must be None, 'static' or 'dynamic', got {r.scaler!r}")
    if not (is_real(r.static_scale) and math.isfinite(r.static_scale) and r.static_scale > 0):
        raise ValueError(f"{own}: static_scale must be a finite number > 0, got {r.static_scale!r}")
    check_integer(r.growth_interval, f"{own}: growth_interval", 1)
    if r.update_rounding not in UPDATE_ROUNDINGS:
        raise ValueError(f"{own}: update_rounding must be one of {', '.join(UPDATE_ROUNDINGS)}, got "
                         f"{r.update_rounding!r}")
    if r.autocast is not None:
        try:
            autocast(r.autocast)
        except ValueError as e:
            raise ValueError(f"{own}: autocast: {e}") from None


@dataclass(frozen=True)
class Recipe:
    """How one training run stores and protects its numbers.

    ``layers``: what every Linear becomes (``lowp.convert``'s config: a per-tensor fp8 scaling,
    :class:`~fpsim.lowp.DelayedScaling` / :class:`~fpsim.lowp.CurrentScaling`, or block scaling,
    :class:`~fpsim.lowp.BlockScaling`; None: they stay ``nn.Linear`` in ``params``), and
    ``layers_skip`` the Linears left out (``lowp.convert``'s ``skip``: names, ``"first"``,
    ``"last"``).  ``fp8=`` / ``fp8_skip=`` / ``block=`` / ``block_skip=`` are their deprecated
    names (a DeprecationWarning; removed 2027-06-01)."""

    name: str
    params: str  # format of the model's parameters (and so of its activations)
    master: bool = False  # float32 master weights in the optimizer
    scaler: str | None = None  # None, "static" or "dynamic"
    static_scale: float = 1024.0
    autocast: str | None = None  # run matmuls under autocast(fmt), params stay as they are
    growth_interval: int = 100
    update_rounding: str = "nearest"  # how the optimizer writes updated weights (optim.UPDATE_ROUNDINGS)
    layers: object = None  # DelayedScaling | CurrentScaling | BlockScaling | None: what the Linears become
    layers_skip: tuple = ()  # Linears left as they are (lowp.convert's skip: names, "first", "last")
    description: str = ""
    fp8: InitVar[object] = _OldLayerField()  # deprecated: layers=
    fp8_skip: InitVar[object] = _OldLayerField()  # deprecated: layers_skip=
    block: InitVar[object] = _OldLayerField()  # deprecated: layers=
    block_skip: InitVar[object] = _OldLayerField()  # deprecated: layers_skip=

    def __post_init__(self, fp8, fp8_skip, block, block_skip):
        """Every field checked (:func:`_check_fields`); the deprecated keywords folded into ``layers``
        / ``layers_skip``, with a warning."""
        _check_fields(self)
        old = {k: v for k, v in (("fp8", fp8), ("fp8_skip", fp8_skip), ("block", block), ("block_skip", block_skip))
               if v is not None}
        if not old:
            return
        warnings.warn(f"Recipe({', '.join(k + '=' for k in old)}) is deprecated (removed 2027-06-01): "
                      "give layers= and layers_skip=", DeprecationWarning, stacklevel=3)
        configs = [v for k, v in old.items() if not k.endswith("_skip")]
        skips = [tuple(v) for k, v in old.items() if k.endswith("_skip") and tuple(v)]
        if len(configs) + (self.layers is not None) > 1:
            raise ValueError(f"Recipe {self.name!r}: one layer conversion, layers= (fp8= and block= are its old "
                             "names), not two")
        if len(skips) + bool(self.layers_skip) > 1:
            raise ValueError(f"Recipe {self.name!r}: one layers_skip= (fp8_skip= and block_skip= are its old "
                             "names), not two")
        if configs:
            object.__setattr__(self, "layers", configs[0])
        if skips:
            object.__setattr__(self, "layers_skip", skips[0])

    @property
    def activations(self) -> str:
        return self.autocast or self.params

    @property
    def gradients(self) -> str:
        """Format of the gradients flowing between layers (fp8: cast to the backward format
        inside each Linear; they flow between layers in float32)."""
        return self.activations

    def forward_context(self):
        """What the forward pass runs inside: ``autocast(self.autocast)``, or nothing special."""
        return autocast(self.autocast) if self.autocast else contextlib.nullcontext()

    def prepare(self, model, *, lr: float, seed: int = 0, optimizer: str = "adam", init_scale: float = 2.0**16,
                backend=None) -> Run:
        """``model`` (float32, fresh) made ready to train under this recipe - the one recipe ->
        run builder: moved to ``backend`` (if given), its parameters rounded into ``params``,
        its Linears converted by ``lowp.convert(model, layers, skip=layers_skip)`` (per-tensor
        fp8: ``lowp.Fp8Linear``, whose ScalingGroup the run updates after every step; block
        formats: ``lowp.BlockLinear``), an optimizer (``"adam"`` or ``"sgd"``, plain) with
        float32 master weights where ``master`` says and the recipe's update rounding (seeded
        with ``seed``), and the loss scaler (:func:`~fpsim.experiments.run.make_scaler`: a
        dynamic one starts at ``init_scale``)."""
        if optimizer not in ("adam", "sgd"):
            raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
        if backend is not None:
            model.to(backend=backend)
        model.to(self.params)
        kept = lowp.convert(model, self.layers, skip=self.layers_skip) if self.layers is not None else None
        scaling = kept if isinstance(kept, ScalingGroup) else None  # block layers keep no per-step state
        cls = Adam if optimizer == "adam" else SGD
        opt = cls(model.parameters(), lr=lr, master_weights=self.master, update_rounding=self.update_rounding,
                  seed=seed)
        return Run(self, model, opt, make_scaler(self, init_scale), scaling)


def _check_recipe(r) -> None:
    if not isinstance(r, Recipe):
        raise TypeError(f"RECIPES.register: a recipe is a Recipe, got {type(r).__name__}")


# The named recipes: ``RECIPES.register(Recipe("name", ...))`` where a recipe is defined adds one
# (``fpsim compare --recipes``, its ``--help`` and the per-recipe fingerprint tests follow).
RECIPES = Registry("recipe", check=_check_recipe, entry_points="fpsim.recipes")


def _plain(*args, **kw) -> None:
    RECIPES.register(Recipe(*args, **kw))


def _converted(name: str, config, *, skip: tuple = (), description: str) -> None:
    """A recipe of float32 parameters (the master weights) whose Linears are converted by
    ``config()`` - a partial, called when the recipe is first asked for, so that importing the
    experiments builds no layer config (:meth:`~fpsim.registry.Registry.register_lazy`)."""

    def build() -> Recipe:
        return Recipe(name, "float32", layers=config(), layers_skip=skip, description=description)

    RECIPES.register_lazy(name, build)


_DELAYED = partial(DelayedScaling, margin=0, amax_history_len=16, amax_init=True)
_plain("fp32", "float32", description="float32 throughout")
_plain("fp16-pure", "float16", description="float16 weights, activations, gradients and Adam state")
_plain("fp16-master", "float16", master=True, description="float16 model + float32 master weights")
_plain("fp16-static", "float16", master=True, scaler="static",
       description="float16 model + float32 masters + static loss scale 1024")
_plain("fp16-dynamic", "float16", master=True, scaler="dynamic",
       description="float16 model + float32 masters + dynamic GradScaler")
_plain("fp16-amp", "float32", scaler="dynamic", autocast="float16",
       description="float32 params, autocast float16 matmuls, GradScaler (PyTorch AMP)")
_plain("bf16-pure", "bfloat16", description="bfloat16 weights, activations, gradients and Adam state")
_plain("bf16-master", "bfloat16", master=True, description="bfloat16 model + float32 master weights")
_converted("fp8-delayed", _DELAYED,
           description="fp8 matmuls: e4m3 weights/inputs, e5m2 gradients, delayed per-tensor scaling, float32 masters")
_converted("fp8-delayed-inner", _DELAYED, skip=("first", "last"),
           description="fp8-delayed for the inner Linears; the first and last stay float32")
_converted("fp8-current", partial(CurrentScaling, margin=0),
           description="fp8 matmuls with per-tensor current scaling (each cast scaled by its own amax)")
_converted("fp8-hopper", partial(_DELAYED, tensor_core="hopper"),
           description="fp8-delayed on Hopper's fp8 tensor cores: 13-bit truncating accumulation, no promotion")
_plain("bf16-kahan", "bfloat16", update_rounding="kahan",
       description="bfloat16 weights and Adam state, Kahan-compensated updates (bfloat16 buffer)")
_plain("bf16-stochastic", "bfloat16", update_rounding="stochastic",
       description="bfloat16 weights and Adam state, stochastically rounded updates")
_converted("mxfp8", partial(BlockScaling, "mxfp8_e4m3"),
           description="MXFP8 GEMMs: e4m3 in blocks of 32 with e8m0 scales, float32 masters")
_converted("mxfp6", partial(BlockScaling, "mxfp6_e2m3", grad_format="mxfp6_e3m2"),
           description="MXFP6 GEMMs: e2m3 weights/inputs, e3m2 gradients, blocks of 32")
_converted("mxfp4", partial(BlockScaling, "mxfp4_e2m1"),
           description="MXFP4 GEMMs: e2m1 in blocks of 32 with e8m0 scales")
_converted("mxfp4-sr-rht", partial(BlockScaling, "mxfp4_e2m1", grad_rounding="stochastic", hadamard=True),
           description="MXFP4 + stochastic rounding of gradients + Hadamard transform on wgrad")
_converted("nvfp4", partial(BlockScaling, "nvfp4", weight_block=(16, 16), grad_rounding="stochastic", hadamard=True),
           skip=("first", "last"),
           description="NVFP4 (e2m1, e4m3 block scales of 16, 16x16 weight tiles), SR + RHT; first/last float32")
_converted("fp8-blockwise", partial(BlockScaling, "fp8_block", weight_block=(128, 128), pow2_scales=True),
           description="DeepSeek-V3 fp8: e4m3, 1x128 activation/gradient tiles, 128x128 weight tiles")
_converted("fp8-deepseek",
           partial(BlockScaling, "fp8_block", weight_block=(128, 128), pow2_scales=True, tensor_core="hopper"),
           description="fp8-blockwise on Hopper's fp8 tensor cores, promoted to float32 every 128 of K")
DEFAULT_RECIPES = ("fp32", "fp16-pure", "fp16-master", "fp16-static", "fp16-dynamic", "bf16-pure", "bf16-master")
EXTENDED_RECIPES = ("fp8-delayed", "fp8-delayed-inner", "bf16-kahan", "bf16-stochastic")
BLOCK_RECIPES = ("mxfp8", "mxfp6", "mxfp4", "mxfp4-sr-rht", "nvfp4", "fp8-blockwise")


def get_recipe(name) -> Recipe:
    """``RECIPES.get(name)``; a :class:`Recipe` object (your own, registered or not) passes through."""
    return name if isinstance(name, Recipe) else RECIPES.get(name)
