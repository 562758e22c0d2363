"""A tiny GPT and its parts: ``Embedding``, ``LayerNorm``, ``CausalSelfAttention``,
``TransformerBlock`` (pre-norm, GELU MLP) and ``TinyGPT`` (token + position embeddings, N blocks,
a final norm, a tied or untied head).

Every layer is made of fpsim ops, so each of its numbers is rounded where the op says: the
attention scores ``q @ k^T`` in the model's format before the softmax sees them, LayerNorm's
statistics in float32 unless ``ln_acc`` says otherwise.  The knobs that the overflow lab turns
(``attn_stable``, ``ln_acc``, ``mask_value``, ``qk_scale``) default to what a careful
implementation does; each one, turned, is a failure practitioners have met in float16.
``qk_norm`` is the cure for attention-logit growth at high learning rates (Wortsman et al.,
arXiv 2309.14322): a LayerNorm over each head's queries and keys before their dot product.
``record_logits()`` turns on a probe that keeps the largest attention logit of every forward
pass (off by default; off, it costs one ``is None`` test per attention call).

Parameters are drawn in float64 from one generator and rounded once into ``fmt``: Linear as
PyTorch initialises it, embeddings N(0, ``emb_std``), LayerNorm weight 1 and bias 0.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .. import ops
from ..checks import check_finite, check_integer, check_seed, is_real
from ..numerics import exp_f32, matmul_f32
from ..numerics.random import normal
from ..ops.norm import check_acc
from ..tensor import Tensor, tensor
from .modules import GELU, Linear, Module, Sequential, model_format, module_rng

__all__ = ["Embedding", "LayerNorm", "CausalSelfAttention", "TransformerBlock", "TinyGPT"]


def _positive_int(value, name: str, owner: str) -> int:
    return check_integer(value, f"{owner}: {name}", 1)


def _check_distribution(cdf: np.ndarray, step: int, position: int) -> None:
    """One line naming the step and the rows whose probabilities are no distribution (NaN or inf
    logits give NaN probabilities; sampling them would silently pick token 0)."""
    bad = ~(np.isfinite(cdf[:, -1]) & (cdf[:, -1] > 0))
    if bad.any():
        raise ValueError(f"TinyGPT.generate: step {step} (position {position}): the logits of rows "
                         f"{np.flatnonzero(bad).tolist()} are not finite (NaN or inf), so there is nothing to sample")


def _check_flag(value, name: str, owner: str) -> None:
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{owner}: {name} must be True or False, got {value!r}")


def _check_attention(qk_scale, stable, mask_value, owner: str, stable_name: str = "stable") -> None:
    """The attention knobs, before anything is drawn: each error names the owner and the argument."""
    if qk_scale is not None:
        check_finite(qk_scale, f"{owner}: qk_scale")
    if mask_value is not None and not (is_real(mask_value) and not math.isnan(mask_value)):
        raise ValueError(f"{owner}: mask_value must be a number (e.g. finfo(float16).min or -inf) or None, "
                         f"got {mask_value!r}")
    _check_flag(stable, stable_name, owner)


class Embedding(Module):
    """A table of ``num_embeddings`` vectors of size ``dim`` (PyTorch's ``nn.Embedding``);
    ``forward(ids)`` picks rows (``ops.embedding``: copied, not rounded)."""

    def __init__(self, num_embeddings: int, dim: int, *, fmt="float32", std: float = 1.0, seed=None, rng=None,
                 backend=None):
        super().__init__()
        self.num_embeddings = _positive_int(num_embeddings, "num_embeddings", "Embedding")
        self.dim = _positive_int(dim, "dim", "Embedding")
        fmt = model_format(fmt, "Embedding")
        rng = module_rng(rng, seed, "Embedding")
        self.weight = tensor(normal(rng, (num_embeddings, dim)).astype(np.float64) * std, fmt, requires_grad=True,
                             backend=backend, name="weight")

    def forward(self, ids) -> Tensor:
        return ops.embedding(ids, self.weight)

    def __repr__(self) -> str:
        return f"Embedding({self.num_embeddings}, {self.dim}, fmt={self.weight.fmt.name})"


class LayerNorm(Module):
    """PyTorch's ``nn.LayerNorm`` over the last axis (``ops.layer_norm``: float32 statistics,
    one rounding).  ``acc``: where the statistics accumulate (None: float32; ``"input"``: the
    input's own format, the naive kernel - see ``fpsim.ops.norm``)."""

    def __init__(self, dim: int, eps: float = 1e-5, *, fmt="float32", acc=None, backend=None):
        super().__init__()
        self.dim = _positive_int(dim, "dim", "LayerNorm")
        check_acc(acc, "LayerNorm")
        fmt = model_format(fmt, "LayerNorm")
        self.eps, self.acc = check_finite(eps, "LayerNorm: eps", minimum=0), acc
        self.weight = tensor(np.ones(dim), fmt, requires_grad=True, backend=backend, name="weight")
        self.bias = tensor(np.zeros(dim), fmt, requires_grad=True, backend=backend, name="bias")

    def forward(self, x: Tensor) -> Tensor:
        return ops.layer_norm(x, self.dim, self.weight, self.bias, self.eps, acc=self.acc)

    def __repr__(self) -> str:
        acc = "" if self.acc is None else f", acc={self.acc!r}"
        return f"LayerNorm({self.dim}, fmt={self.weight.fmt.name}{acc})"


class CausalSelfAttention(Module):
    """Multi-head causal self-attention: Linear q, k, v; ``ops.scaled_dot_product_attention``
    per head (is_causal); a Linear ``proj`` back to ``d_model``.

    ``qk_scale``: the factor on the scores (default 1/sqrt(head dim); 1.0 leaves them unscaled);
    ``stable``: False for a softmax without max-subtraction; ``mask_value``: the causal mask as
    an additive constant (e.g. finfo(float16).min) instead of a boolean one.  ``qk_norm``: a
    LayerNorm over the head dimension (``q_norm``, ``k_norm``: one weight and bias of size head
    dim, shared by the heads) on each head's queries and keys before the scores; they run as
    LayerNorm does (float32 statistics, one rounding into the model's format).

    ``record_logits()`` starts the probe: every forward pass then appends to ``max_logits`` the
    largest |q.k * scale| over the (query, key) pairs the causal mask allows, all heads and the
    whole batch - a Python float from float32 products of the stored q and k (after qk_norm),
    the values the scores' matmul rounds.
    """

    def __init__(self, d_model: int, n_heads: int, *, fmt="float32", rng=None, seed=None, qk_scale=None,
                 stable: bool = True, mask_value=None, qk_norm: bool = False, backend=None):
        super().__init__()
        d_model = _positive_int(d_model, "d_model", "CausalSelfAttention")
        n_heads = _positive_int(n_heads, "n_heads", "CausalSelfAttention")
        if d_model % n_heads:
            raise ValueError(f"CausalSelfAttention: n_heads {n_heads} does not divide d_model {d_model}")
        _check_attention(qk_scale, stable, mask_value, "CausalSelfAttention")
        _check_flag(qk_norm, "qk_norm", "CausalSelfAttention")
        rng = module_rng(rng, seed, "CausalSelfAttention")
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.qk_scale, self.stable, self.mask_value, self.qk_norm = qk_scale, stable, mask_value, bool(qk_norm)
        for name in ("q", "k", "v", "proj"):
            setattr(self, name, Linear(d_model, d_model, fmt=fmt, rng=rng, backend=backend))
        if self.qk_norm:
            self.q_norm = LayerNorm(self.head_dim, fmt=fmt, backend=backend)
            self.k_norm = LayerNorm(self.head_dim, fmt=fmt, backend=backend)
        self.max_logits = None  # the probe's record: None (off) or a list

    def record_logits(self, on: bool = True) -> list | None:
        """Start (``on``: a fresh, empty ``max_logits``) or stop (``max_logits`` None) the probe;
        returns ``max_logits``."""
        _check_flag(on, "on", "CausalSelfAttention.record_logits")
        self.max_logits = [] if on else None
        return self.max_logits

    def _qkv(self, x: Tensor) -> tuple:
        """q, k, v (batch, heads, t, head dim), q and k through qk_norm where it is on."""
        b, t, _ = x.shape
        heads = (b, t, self.n_heads, self.head_dim)
        q, k, v = (getattr(self, n)(x).reshape(heads).transpose(0, 2, 1, 3) for n in ("q", "k", "v"))
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        return q, k, v

    def _record(self, q: Tensor, k: Tensor, allowed: np.ndarray) -> None:
        be = q.backend
        q32, k32 = (np.asarray(be.to_numpy(a.f32()), dtype=np.float32) for a in (q, k))
        scale = np.float32(1.0 / math.sqrt(self.head_dim) if self.qk_scale is None else self.qk_scale)
        s = np.abs(matmul_f32(q32, np.swapaxes(k32, -1, -2)) * scale)
        self.max_logits.append(float(np.where(allowed, s, np.float32(0)).max()))

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"CausalSelfAttention: input shape {x.shape} does not fit (batch, time, "
                             f"{self.d_model})")
        b, t, _ = x.shape
        q, k, v = self._qkv(x)
        if self.max_logits is not None:
            self._record(q, k, np.tril(np.ones((t, t), dtype=bool)))
        y = ops.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.qk_scale,
                                             mask_value=self.mask_value, stable=self.stable)
        return self.proj(y.transpose(0, 2, 1, 3).reshape(b, t, self.d_model))

    def decode(self, x: Tensor, cache: list, *, fused: bool = False) -> Tensor:
        """The attention of new positions ``x`` (batch, t_new, d_model) over the cached keys and
        values and their own, as a rollout engine runs it.  ``cache`` is a list, empty at first,
        holding [k, v] (batch, heads, t_past, head dim) in the model's format; each call appends
        the new positions' k and v (moved, not rounded).  ``fused=False``: the same eager
        composite as :meth:`forward` (scores and probabilities rounded into the format);
        ``fused=True``: as a fused decode kernel - q, k and v widened exactly to float32, scores,
        softmax and the product with v in float32, one rounding of the output into x's format."""
        b, t, _ = x.shape
        q, k, v = self._qkv(x)
        if cache:
            k, v = ops.concat([cache[0], k], axis=2), ops.concat([cache[1], v], axis=2)
        cache[:] = [k, v]
        allowed = np.tril(np.ones((t, k.shape[2]), dtype=bool), k=k.shape[2] - t)  # query i sees keys <= past + i
        if fused:
            y = ops.scaled_dot_product_attention(*(a.to("float32") for a in (q, k, v)), allowed, scale=self.qk_scale,
                                                 stable=self.stable).to(x.fmt.name)
        else:
            y = ops.scaled_dot_product_attention(q, k, v, allowed, scale=self.qk_scale, mask_value=self.mask_value,
                                                 stable=self.stable)
        return self.proj(y.transpose(0, 2, 1, 3).reshape(b, t, self.d_model))

    def __repr__(self) -> str:
        qk = ", qk_norm=True" if self.qk_norm else ""
        return f"CausalSelfAttention(d_model={self.d_model}, n_heads={self.n_heads}{qk})"


class TransformerBlock(Module):
    """Pre-norm block: ``x + attn(ln1(x))``, then ``x + mlp(ln2(x))`` with a GELU MLP of width
    ``mlp_ratio * d_model``."""

    def __init__(self, d_model: int, n_heads: int, *, mlp_ratio: int = 4, fmt="float32", rng=None, seed=None,
                 ln_acc=None, backend=None, **attn):
        super().__init__()
        rng = module_rng(rng, seed, "TransformerBlock")
        check_acc(ln_acc, "TransformerBlock", "ln_acc")
        hidden = _positive_int(mlp_ratio, "mlp_ratio", "TransformerBlock") * d_model
        self.ln1 = LayerNorm(d_model, fmt=fmt, acc=ln_acc, backend=backend)
        self.attn = CausalSelfAttention(d_model, n_heads, fmt=fmt, rng=rng, backend=backend, **attn)
        self.ln2 = LayerNorm(d_model, fmt=fmt, acc=ln_acc, backend=backend)
        self.mlp = Sequential(Linear(d_model, hidden, fmt=fmt, rng=rng, backend=backend), GELU(),
                              Linear(hidden, d_model, fmt=fmt, rng=rng, backend=backend))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))

    def decode(self, x: Tensor, cache: list, *, fused: bool = False) -> Tensor:
        """:meth:`forward` for new positions, the attention through its KV ``cache``
        (:meth:`CausalSelfAttention.decode`)."""
        x = x + self.attn.decode(self.ln1(x), cache, fused=fused)
        return x + self.mlp(self.ln2(x))


class TinyGPT(Module):
    """Token + position embeddings, ``n_layers`` pre-norm blocks, a final LayerNorm and a head
    to ``vocab_size`` logits: ``forward(ids)`` maps integer ids (batch, time <= context) to
    logits (batch, time, vocab_size).

    ``tied``: the head multiplies by the token embedding's transpose (no head weight of its
    own); else an untied ``Linear(d_model, vocab_size, bias=False)``.  ``emb_std``: the
    embeddings' initial standard deviation (the overflow lab raises it to make activations
    large).  ``ln_acc``, and ``qk_scale`` / ``attn_stable`` / ``mask_value`` / ``qk_norm`` for
    every attention: see :class:`LayerNorm` and :class:`CausalSelfAttention`.
    :meth:`record_logits` starts every attention's probe of its largest logit.
    """

    def __init__(self, vocab_size: int, context: int, d_model: int = 64, n_layers: int = 2, n_heads: int = 4, *,
                 mlp_ratio: int = 4, tied: bool = False, fmt="float32", seed: int = 0, emb_std: float = 1.0,
                 ln_acc=None, qk_scale=None, attn_stable: bool = True, mask_value=None, qk_norm: bool = False,
                 backend=None):
        super().__init__()
        for name, v in (("vocab_size", vocab_size), ("context", context), ("d_model", d_model),
                        ("n_layers", n_layers), ("n_heads", n_heads), ("mlp_ratio", mlp_ratio)):
            _positive_int(v, name, "TinyGPT")
        if d_model % n_heads:  # checked before any parameter is drawn
            raise ValueError(f"TinyGPT: n_heads {n_heads} does not divide d_model {d_model}")
        model_format(fmt, "TinyGPT")
        check_seed(seed, "TinyGPT: seed")
        check_finite(emb_std, "TinyGPT: emb_std", minimum=0)
        _check_flag(tied, "tied", "TinyGPT")
        _check_attention(qk_scale, attn_stable, mask_value, "TinyGPT", stable_name="attn_stable")
        _check_flag(qk_norm, "qk_norm", "TinyGPT")
        check_acc(ln_acc, "TinyGPT", "ln_acc")
        rng = np.random.default_rng(seed)
        self.vocab_size, self.context, self.d_model, self.tied = vocab_size, context, d_model, bool(tied)
        self.tok_emb = Embedding(vocab_size, d_model, fmt=fmt, std=emb_std, rng=rng, backend=backend)
        self.pos_emb = Embedding(context, d_model, fmt=fmt, std=emb_std, rng=rng, backend=backend)
        self.blocks = Sequential(*(TransformerBlock(d_model, n_heads, mlp_ratio=mlp_ratio, fmt=fmt, rng=rng,
                                                    ln_acc=ln_acc, qk_scale=qk_scale, stable=attn_stable,
                                                    mask_value=mask_value, qk_norm=qk_norm, backend=backend)
                                   for _ in range(n_layers)))
        self.ln_f = LayerNorm(d_model, fmt=fmt, acc=ln_acc, backend=backend)
        if not self.tied:
            self.head = Linear(d_model, vocab_size, bias=False, fmt=fmt, rng=rng, backend=backend)

    def record_logits(self, on: bool = True) -> list:
        """Start (or, ``on=False``, stop) the largest-logit probe of every attention
        (:meth:`CausalSelfAttention.record_logits`); returns their ``max_logits`` lists, block by block."""
        return [blk.attn.record_logits(on) for blk in self.blocks]

    def max_logits_recorded(self) -> list:
        """Per recorded forward pass, the largest |attention logit| over every block (empty if
        the probe is off)."""
        recs = [blk.attn.max_logits or [] for blk in self.blocks]
        return [max(v) for v in zip(*recs)]

    def check_ids(self, ids) -> np.ndarray:
        """``ids`` as an integer array (batch, time), or a one-line error naming its shape."""
        be = self.tok_emb.weight.backend
        arr = be.asarray(ids.data if isinstance(ids, Tensor) else ids)
        if arr.dtype.kind not in "iu":
            raise TypeError(f"TinyGPT: token ids must be integers, got dtype {arr.dtype} (shape {tuple(arr.shape)})")
        if arr.ndim != 2 or not 1 <= arr.shape[1] <= self.context:
            raise ValueError(f"TinyGPT: token ids of shape {tuple(arr.shape)} do not fit (batch, time) with "
                             f"1 <= time <= context {self.context}")
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= self.vocab_size):
            raise ValueError(f"TinyGPT: token ids of shape {tuple(arr.shape)} must lie in [0, {self.vocab_size}), "
                             f"got {int(arr.min())}..{int(arr.max())}")
        return arr

    def forward(self, ids) -> Tensor:
        arr = self.check_ids(ids)
        t = arr.shape[1]
        x = self.tok_emb(arr) + self.pos_emb(self.tok_emb.weight.backend.xp.arange(t))
        x = self.ln_f(self.blocks(x))
        if self.tied:
            return ops.matmul(x, self.tok_emb.weight.T)
        return self.head(x)

    def decode(self, ids, caches: list, *, fused: bool = False) -> Tensor:
        """Logits (batch, t_new, vocab) of new positions ``ids`` (batch, t_new) that follow the
        positions already in ``caches`` (one list per block, empty at first; see
        :meth:`CausalSelfAttention.decode`)."""
        arr = self.check_ids(ids)
        if len(caches) != len(self.blocks):
            raise ValueError(f"TinyGPT: caches must hold one list per block ({len(self.blocks)}), got {len(caches)}")
        past = caches[0][0].shape[2] if caches[0] else 0
        if past + arr.shape[1] > self.context:
            raise ValueError(f"TinyGPT: {past} cached + {arr.shape[1]} new positions exceed the context {self.context}")
        x = self.tok_emb(arr) + self.pos_emb(self.tok_emb.weight.backend.xp.arange(past, past + arr.shape[1]))
        for block, cache in zip(self.blocks, caches):
            x = block.decode(x, cache, fused=fused)
        x = self.ln_f(x)
        return ops.matmul(x, self.tok_emb.weight.T) if self.tied else self.head(x)

    def generate(self, prompt, new_tokens: int, *, seed=None, rng=None, temperature: float = 1.0,
                 fused: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Sample ``new_tokens`` tokens after ``prompt`` (batch, t) as a rollout engine does:
        one forward of the prompt fills a KV cache, then one position at a time through it
        (:meth:`decode`; ``fused`` as there).  Each step's logits are widened to float32 and
        divided by ``temperature`` there; ``log_softmax`` runs in float32 and the token is drawn
        from those probabilities (inverse CDF in float64, ``rng`` or ``seed``).  Returns the ids
        (batch, t + new_tokens) and the float32 log-probabilities the rollout gave the chosen
        tokens (batch, new_tokens).  Runs without building a graph.

        Refused before anything runs: a prompt and ``new_tokens`` that need more positions than the
        model has (the last token drawn is not fed back: t + new_tokens - 1 <= context).  Refused at
        the step: logits that are not finite (NaN or inf: there is no distribution to draw from)."""
        from ..tensor import no_grad  # here, not at the top: the module's imports stay as they were

        arr = np.asarray(self.tok_emb.weight.backend.to_numpy(self.check_ids(prompt)))
        new_tokens = _positive_int(new_tokens, "new_tokens", "TinyGPT.generate")
        if not (isinstance(temperature, numbers.Real) and math.isfinite(temperature) and temperature > 0):
            raise ValueError(f"TinyGPT.generate: temperature must be a finite number > 0, got {temperature!r}")
        rng = module_rng(rng, seed, "TinyGPT.generate")
        t = arr.shape[1]
        if t + new_tokens - 1 > self.context:
            raise ValueError(f"TinyGPT.generate: a prompt of {t} positions and new_tokens {new_tokens} need "
                             f"{t + new_tokens - 1} positions; the model has {self.context} (context): at most "
                             f"{self.context - t + 1} new tokens after this prompt")
        caches = [[] for _ in self.blocks]
        ids, chosen, step_ids = arr, [], arr
        with no_grad():
            for step in range(new_tokens):
                logits = self.decode(step_ids, caches, fused=fused)[:, -1].to("float32")
                lp = logits.backend.to_numpy(ops.log_softmax(logits * (1.0 / temperature), axis=-1).f32())
                # float32 probabilities (correctly rounded exp), summed in float64 one after the
                # other (cumsum's order is its definition): the same draw on every machine
                cdf = np.cumsum(exp_f32(lp).astype(np.float64), axis=-1)
                _check_distribution(cdf, step, t + step)
                tok = np.minimum((cdf < rng.random((len(cdf), 1)) * cdf[:, -1:]).sum(axis=-1), self.vocab_size - 1)
                chosen.append(lp[np.arange(len(tok)), tok])
                step_ids = tok[:, None].astype(arr.dtype)
                ids = np.concatenate([ids, step_ids], axis=1)
        return ids, np.stack(chosen, axis=1).astype(np.float32)

    def __repr__(self) -> str:
        n = len(self.blocks)
        return (f"TinyGPT(vocab={self.vocab_size}, context={self.context}, d_model={self.d_model}, layers={n}, "
                f"heads={self.blocks[0].attn.n_heads}, tied={self.tied})")


def num_parameters(model: Module) -> int:
    """How many numbers the model's parameters hold."""
    return sum(math.prod(p.shape) for p in model.parameters())
