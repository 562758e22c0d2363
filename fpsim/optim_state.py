"""What an optimizer's state is stored in: :class:`StateFormat`, the format of Adam's moments or
Muon's momentum buffer, apart from the parameters' own format.

An optimizer given ``state_format=`` (``fpsim.optim.Adam``, ``fpsim.optim.Muon``) reads its state
with :meth:`StateFormat.load` (float32), computes the new state in float32, takes the update from
those float32 values (as bitsandbytes' 8-bit kernels and llm.c's bfloat16 state do: the state is
quantized when it is written back, not before it is used), and writes it with
:meth:`StateFormat.store`.  The formats (:data:`STATE_FORMATS`):

- ``float32``: kept as is (4 bytes a value).
- ``bfloat16`` / ``bfloat16-sr``: rounded once into bfloat16, to nearest or stochastically
  (``fpsim.tensor.round_result``, so monitors see it; the optimizer's seeded generator).
- ``int8-linear``: blockwise absmax linear 8-bit - per block of ``block`` values (2048, as in
  bitsandbytes' 8-bit optimizers) ``scale = absmax / 127`` (signed state) or ``absmax / 255``
  (the non-negative second moment), the code ``rint(x / scale)``, the value ``code * scale``.
- ``int8-dynamic``: bitsandbytes' dynamic tree quantization (:func:`dynamic_map`, signed for the
  first moment, unsigned for the second), blockwise: ``x / absmax`` to the nearest of the 256
  map values (a tie to the smaller), the value ``map[code] * absmax``.
- ``e4m3-coat``: COAT's (arXiv 2410.19313) dynamic range expansion, per group of 128: ``y =
  sign(x) |x|^k`` with ``k = log(R_e4m3) / log(max|x| / min|x|)`` (min over the group's non-zero
  values; ``R_e4m3 = 448 / 2^-6``, e4m3's normal range; k = 1 for a group of one magnitude), scaled
  so the group's largest is 448 - computed as ``448 (|x| / amax)^k`` - and cast to e4m3 with
  saturation; back: ``amax (|q| / 448)^(1/k)``, stored: the codes, amax and k per group.  The powers as
  ``exp(k log|x|)`` in fpsim's correctly rounded float32 ``exp`` / ``log``, k by the correctly
  rounded ``log64``: the same bits on every machine.

Every division, product and rounding above is one float32 (IEEE) operation, so the stored codes
are the same on every machine.  :meth:`Stored.nbytes` is what the state really occupies, codes and
scales together (:func:`bytes_per_value`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .backend import get_backend
from .formats import F32, cast, default_rng, get_format
from .numerics import exp_f32, log_f32
from .numerics.scalars import log64
from .tensor import round_result

__all__ = ["STATE_FORMATS", "StateFormat", "Stored", "bytes_per_value", "dynamic_map", "get_state_format",
           "stored_entries", "stored_state", "rng_words", "rng_from_words"]

E4M3 = get_format("float8_e4m3fn")
BF16 = get_format("bfloat16")
E4M3_RANGE = 448.0 / 2.0**-6


def dynamic_map(signed: bool = True, max_exponent_bits: int = 7, total_bits: int = 8) -> np.ndarray:
    """bitsandbytes' ``create_dynamic_map``: 256 sorted float32 values in [-1, 1] (signed) or [0, 1]:
    for each decade 10^(i - 6), i = 0..6, the midpoints of ``2^i + 1`` (signed) or ``2^(i+1) + 1``
    points evenly spaced over [0.1, 1], times the decade, and their negatives when signed; then 0
    and 1.  The spacing as torch's float32 ``linspace`` computes it: ``start + step * j`` for the
    first half, ``end - step * (n - 1 - j)`` for the rest, each operation in float32."""
    non_sign = total_bits - 1  # bitsandbytes' own: 7 for the signed map and the unsigned alike
    data: list[float] = []
    for i in range(max_exponent_bits):
        n = 2 ** (i + non_sign - max_exponent_bits) + 1 if signed else 2 ** (i + non_sign - max_exponent_bits + 1) + 1
        b = _linspace32(0.1, 1.0, n)
        means = (b[:-1] + b[1:]) / np.float32(2)
        decade = np.float32(10.0 ** (-(max_exponent_bits - 1) + i))
        data += (decade * means).tolist()
        if signed:
            data += (-decade * means).tolist()
    data += [0.0, 1.0]
    data += [0.0] * (2**total_bits - len(data))
    return np.sort(np.array(data, np.float32))


def _linspace32(start: float, end: float, n: int) -> np.ndarray:
    """torch.linspace(start, end, n) in float32 as its CPU kernel computes it: ``step = (end - start)
    / (n - 1)`` in float32, then ``start + step * j`` (first half) or ``end - step * (n - 1 - j)``
    as one fused multiply-add - here in float64, where product and sum are exact (a 24-bit step
    times a small integer, added at nearby exponents), rounded once to float32."""
    s, e = np.float32(start), np.float32(end)
    step = np.float64((e - s) / np.float32(n - 1))
    j = np.arange(n)
    first = np.float64(s) + step * j
    second = np.float64(e) - step * (n - 1 - j)
    return np.where(j < n // 2, first, second).astype(np.float32)


@dataclass
class Stored:
    """One state tensor as stored: ``codes`` (the format's storage: float32, bfloat16, int8 /
    uint8 codes or e4m3), and per block ``scales`` (float32) and, for COAT, ``k`` (float32)."""

    codes: np.ndarray
    shape: tuple
    scales: np.ndarray | None = None
    k: np.ndarray | None = None
    fmt: object = None  # the StateFormat that stored it

    def f32(self) -> np.ndarray:
        """The float32 values held (what ``Tensor.f32`` gives for a state kept as a Tensor)."""
        return self.fmt.load(self)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.codes, self.scales, self.k) if a is not None)


@dataclass(frozen=True)
class StateFormat:
    """A state format (module docstring): ``kind`` one of float / linear / dynamic / coat, ``fmt`` the
    element format of the float kinds, ``rounding`` nearest or stochastic, ``block`` values per scale."""

    name: str
    kind: str
    fmt: object = None
    rounding: str = "nearest"
    block: int = 2048

    def store(self, x32, signed: bool = True, rng=None, backend=None, target: str = "") -> Stored:
        """``x32`` (float32 array) in this format; ``signed=False`` for a non-negative state (the
        second moment: unsigned codes)."""
        st = self._store(np.asarray(x32, np.float32), signed, rng, backend, target)
        st.fmt = self
        return st

    def _store(self, x32, signed, rng, backend, target) -> Stored:
        if self.kind == "float":
            if self.fmt is F32:
                return Stored(x32.copy(), x32.shape)
            rng = rng if rng is not None or self.rounding == "nearest" else default_rng()
            be = backend if backend is not None else get_backend("numpy")
            out = round_result(x32, self.fmt, be, "optim_state.store", "update", target, rounding=self.rounding,
                               rng=rng)
            return Stored(np.asarray(out), x32.shape)
        blocks = _blocks(x32, self.block)
        # a block holding inf or NaN: codes 0 and a NaN scale (it loads as NaN), never a NaN cast to an integer
        bad = ~np.all(np.isfinite(blocks), axis=1)
        blocks[bad] = 0
        if self.kind == "coat":
            st = _coat_store(blocks, x32.shape)
        elif self.kind == "linear":
            scale = np.max(np.abs(blocks), axis=1) / np.float32(127 if signed else 255)
            safe = np.where(scale > 0, scale, np.float32(1))
            codes = np.rint(blocks / safe[:, None]).astype(np.int8 if signed else np.uint8)
            st = Stored(codes.ravel()[: x32.size], x32.shape, scale)
        else:
            amax = np.max(np.abs(blocks), axis=1)
            safe = np.where(amax > 0, amax, np.float32(1))
            st = Stored(_nearest(dynamic_map(signed), blocks / safe[:, None]).ravel()[: x32.size], x32.shape, amax)
        st.scales[bad] = np.nan
        return st

    def load(self, s: Stored) -> np.ndarray:
        """The float32 values ``s`` holds."""
        if self.kind == "float":
            return s.codes.astype(np.float32)
        if self.kind == "coat":
            return _coat_load(s, self.block)
        codes = _padded(s.codes, self.block)
        if self.kind == "linear":
            vals = codes.astype(np.float32) * s.scales[:, None]
        else:
            signed = codes.dtype == np.int8
            vals = dynamic_map(signed)[codes.astype(np.int64) + (128 if signed else 0)] * s.scales[:, None]
        return _unblock(vals, s.shape)

    def zeros(self, shape, signed: bool = True, backend=None) -> Stored:
        return self.store(np.zeros(shape, np.float32), signed, backend=backend)


def _blocks(x32: np.ndarray, block: int) -> np.ndarray:
    """``x32`` flattened into rows of ``block`` values, the last padded with zeros."""
    flat = x32.ravel()
    n = max(1, math.ceil(flat.size / block))
    out = np.zeros(n * block, np.float32)
    out[: flat.size] = flat
    return out.reshape(n, block)


def _size(shape: tuple) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _padded(codes: np.ndarray, block: int) -> np.ndarray:
    """The stored codes (as many as the tensor has values) as rows of ``block``, zero-padded."""
    n = max(1, math.ceil(codes.size / block))
    out = np.zeros(n * block, codes.dtype)
    out[: codes.size] = codes
    return out.reshape(n, block)


def _unblock(rows: np.ndarray, shape: tuple) -> np.ndarray:
    return rows.ravel()[: _size(shape)].reshape(shape).astype(np.float32)


def _nearest(table: np.ndarray, xn: np.ndarray) -> np.ndarray:
    """The index (int8 for a signed table, offset by 128; uint8 otherwise) of the table value
    nearest each of ``xn`` (float32), a tie to the smaller; distances exact in float64."""
    hi = np.clip(np.searchsorted(table, xn, side="left"), 1, table.size - 1)
    lo = hi - 1
    d_lo = np.abs(xn.astype(np.float64) - table[lo].astype(np.float64))
    d_hi = np.abs(table[hi].astype(np.float64) - xn.astype(np.float64))
    idx = np.where(d_hi < d_lo, hi, lo)
    if table[0] < 0:
        return (idx - 128).astype(np.int8)
    return idx.astype(np.uint8)


def _coat_k(a: np.ndarray) -> np.ndarray:
    """COAT's exponent per group (rows of ``a`` = |x|): log(R_e4m3) / log(max / min non-zero), float32."""
    ks = []
    for row in a:
        nz = row[row > 0]
        lo, hi = (float(nz.min()), float(nz.max())) if nz.size else (1.0, 1.0)
        ks.append(1.0 if hi <= lo else log64(E4M3_RANGE) / log64(hi / lo))
    return np.array(ks, np.float32)


def _pow(a: np.ndarray, k: np.ndarray) -> np.ndarray:
    """|a|^k (rows of a, k per row) as exp(k * log a) in fpsim's float32 exp / log; 0 stays 0."""
    pos = a > 0
    la = log_f32(np.where(pos, a, np.float32(1)))
    return np.where(pos, exp_f32(k[:, None] * la), np.float32(0)).astype(np.float32)


def _coat_store(blocks: np.ndarray, shape: tuple) -> Stored:
    """COAT's expansion on the group's magnitudes relative to its largest (``(|x| / amax)^k``, the same
    values as ``|x|^k`` scaled by ``448 / amax^k``, without float32 underflow for a large k)."""
    a = np.abs(blocks)
    k = _coat_k(a)
    amax = np.max(a, axis=1)
    safe = np.where(amax > 0, amax, np.float32(1))
    y = _pow(a / safe[:, None], k) * np.float32(E4M3.max)
    return Stored(cast(np.copysign(y, blocks), E4M3, saturate=True).ravel()[: _size(shape)], shape, amax, k)


def _coat_load(st: Stored, block: int) -> np.ndarray:
    q = _padded(st.codes, block).astype(np.float32)
    y = np.abs(q) / np.float32(E4M3.max)
    return _unblock(np.copysign(_pow(y, (np.float32(1) / st.k).astype(np.float32)) * st.scales[:, None], q), st.shape)


STATE_FORMATS: dict[str, StateFormat] = {
    "float32": StateFormat("float32", "float", F32),
    "bfloat16": StateFormat("bfloat16", "float", BF16),
    "bfloat16-sr": StateFormat("bfloat16-sr", "float", BF16, "stochastic"),
    "int8-linear": StateFormat("int8-linear", "linear"),
    "int8-dynamic": StateFormat("int8-dynamic", "dynamic"),
    "e4m3-coat": StateFormat("e4m3-coat", "coat", E4M3, block=128),
}


def get_state_format(name) -> StateFormat | None:
    """A :class:`StateFormat` by name (or itself; None stays None: the parameter's own format)."""
    if name is None or isinstance(name, StateFormat):
        return name
    if name not in STATE_FORMATS:
        raise ValueError(f"unknown state_format {name!r}; known: {', '.join(STATE_FORMATS)}")
    return STATE_FORMATS[name]


STORED_PARTS = ("codes", "scales", "k")  # a Stored's arrays, as an optimizer's state dict names them


def stored_entries(key: str, st: Stored) -> dict:
    """``st`` as state-dict entries (copies): ``key.codes``, and ``key.scales`` / ``key.k`` where
    the format keeps them - the codes in their own dtype (bfloat16, int8, uint8, e4m3), bit for bit."""
    return {f"{key}.{part}": getattr(st, part).copy() for part in STORED_PARTS if getattr(st, part) is not None}


def stored_from_entries(sd: dict, key: str, fmt: StateFormat, shape, signed: bool, problems) -> Stored | None:
    """The :class:`Stored` that :func:`stored_entries` wrote under ``key``, for a state of ``shape``
    in ``fmt`` (``signed=False``: the second moment).  Each entry must have the dtype and shape
    that ``fmt`` stores for such a state (none missing, none extra); what does not is added to
    ``problems`` (a :class:`fpsim.statedict.Problems`) and None returned."""
    want = fmt.zeros(shape, signed)
    ok = True
    for part in STORED_PARTS:
        ref, k = getattr(want, part), f"{key}.{part}"
        v = sd.get(k)
        if ref is None and v is not None:
            problems.add(f"{k}: state_format {fmt.name!r} keeps no {part}")
        elif ref is not None and not (isinstance(v, np.ndarray) and v.dtype == ref.dtype and v.shape == ref.shape):
            got = "nothing" if v is None else f"{getattr(v, 'dtype', type(v).__name__)} {np.shape(v)}"
            problems.add(f"{k} must be {ref.dtype} {ref.shape} in state_format {fmt.name!r}, got {got}")
        else:
            continue
        ok = False
    if not ok:
        return None
    parts = {part: None if getattr(want, part) is None else np.array(sd[f"{key}.{part}"]) for part in STORED_PARTS}
    return Stored(parts["codes"], tuple(shape), parts["scales"], parts["k"], fmt)


def stored_state(sd: dict, fmt: StateFormat | None, shapes: list, problems) -> dict:
    """The state an optimizer's ``state_dict`` holds in ``fmt`` (its ``state_format``; None: none),
    as ``(i, name) -> Stored`` for parameter ``i`` of shape ``shapes[i]``.  The state dict must name
    the same ``state_format``; each stored tensor is checked by :func:`stored_from_entries`, and a
    ``scales`` / ``k`` entry without its codes is a problem."""
    mine = None if fmt is None else fmt.name
    saved = sd.get("state_format")
    if saved != mine:
        problems.add(f"the state was saved with state_format {saved!r}, this optimizer keeps {mine!r}")
        return {}
    out, parts_seen = {}, []
    for k in sd:
        parts = k.split(".")
        if mine is None or len(parts) != 4 or parts[0] != "state" or parts[3] not in STORED_PARTS:
            continue
        if not parts[1].isdigit() or int(parts[1]) >= len(shapes):
            problems.unexpected.append(k)
        elif parts[3] == "codes":
            i, name = int(parts[1]), parts[2]
            out[i, name] = stored_from_entries(sd, f"state.{i}.{name}", fmt, shapes[i], name != "exp_avg_sq",
                                               problems)
        else:
            parts_seen.append((k, (int(parts[1]), parts[2])))
    for k, at in parts_seen:
        if at not in out:
            problems.add(f"{k} has no state.{at[0]}.{at[1]}.codes")
    return out


_W = (1 << 64) - 1


def rng_words(rng: np.random.Generator) -> np.ndarray:
    """A PCG64 generator's state as six uint64 words (state and increment, high word first; the
    buffered 32 bits and whether one is held): what a state dict saves without pickle."""
    st = rng.bit_generator.state
    if st["bit_generator"] != "PCG64":
        raise ValueError(f"rng_words: the generator must be numpy's PCG64 (default_rng), got {st['bit_generator']}")
    s, inc = st["state"]["state"], st["state"]["inc"]
    return np.array([s >> 64, s & _W, inc >> 64, inc & _W, st["has_uint32"], st["uinteger"]], np.uint64)


def rng_from_words(words, key: str, problems) -> np.random.Generator | None:
    """The PCG64 generator :func:`rng_words` saved (None, with a problem added, unless ``words`` is
    six uint64 words with a valid buffer flag and an odd increment)."""
    if not (isinstance(words, np.ndarray) and words.dtype == np.uint64 and words.shape == (6,)
            and words[4] <= 1 and words[5] <= 0xFFFFFFFF and words[3] % 2 == 1):
        problems.add(f"{key} must be six uint64 words (numpy PCG64's state, as state_dict saves it), got {words!r}")
        return None
    w = [int(v) for v in words]
    rng = np.random.Generator(np.random.PCG64())
    rng.bit_generator.state = {"bit_generator": "PCG64", "state": {"state": w[0] << 64 | w[1], "inc": w[2] << 64 | w[3]},
                               "has_uint32": w[4], "uinteger": w[5]}
    return rng


def bytes_per_value(fmt, n: int = 1 << 20, signed: bool = True) -> float:
    """Bytes a state of ``n`` values occupies in ``fmt`` (codes and scales), per value."""
    f = get_state_format(fmt)
    return f.zeros((n,), signed).nbytes / n
