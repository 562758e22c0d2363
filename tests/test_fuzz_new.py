"""Fuzzing the newer surface (issue 28): block quantization, BlockScaling, the transformer ops and
modules, the non-finite tracer, backend moves, and checkpoints of block and transformer models.

The property is the one of ``test_fuzz.py``: the reference's answer (the exact-fraction block
reference, float64 numpy, PyTorch, a step-by-step replay), or ONE ``ValueError`` / ``TypeError``
whose one-line message names what was wrong - never another exception, never a changed model
after a failed load.
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from support.block_reference import MX_ELEM, blocks_1d, fp8_block, mx_block, nvfp4_block, nvfp4_tensor_scale

import fpsim
from fpsim import checkpoint, nn, ops
from fpsim.formats import BLOCK_FORMATS, SCALE_ROUNDINGS, get_block_format, quantize
from fpsim.lowp import BlockScaling, convert

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
ALLOWED = (ValueError, TypeError)
BLOCK_NAMES = sorted(BLOCK_FORMATS) + ["mxfp8", "mxfp6", "mxfp4", "fp8_blockwise", "deepseek_fp8"]


def one_line(e: BaseException, *names) -> bool:
    """One line, naming at least one of ``names``."""
    msg = str(e)
    return "\n" not in msg.strip() and any(str(n) in msg for n in names)


def same(a, b) -> bool:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return bool(np.all((np.isnan(a) & np.isnan(b)) | ((a == b) & (np.signbit(a) == np.signbit(b)))))


# -------------------------------------------------------------------- quantize / dequantize

VALUES = st.one_of(st.floats(-1e4, 1e4, width=32), st.floats(width=32, allow_nan=False, allow_infinity=False),
                   st.sampled_from([0.0, -0.0, 1e-40, -2.0**-126, 2.0**-149, 448.0, 6.0, 3.4e38, 1e-6, np.inf,
                                    -np.inf, np.nan]))


# the formats the exact-fraction reference is written for (mxint8's elements are checked in test_block_formats)
REFERENCED = [n for n in BLOCK_NAMES if get_block_format(n).name in MX_ELEM or get_block_format(n).family != "mx"]


@st.composite
def block_case(draw):
    name = draw(st.sampled_from(REFERENCED))
    fam = get_block_format(name).family
    x = draw(hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=9), elements=VALUES))
    axis = draw(st.integers(-x.ndim, x.ndim - 1))
    block = draw(st.one_of(st.none(), st.integers(1, 40), st.just(10**9)))
    sr = draw(st.sampled_from([None, *SCALE_ROUNDINGS])) if fam == "mx" else None
    pow2 = draw(st.booleans()) if fam == "fp8_block" else False
    return name, x, axis, block, sr, pow2


def _reference(name, x, axis, k, sr, pow2):
    bf = get_block_format(name)
    if bf.family == "mx":
        elem = MX_ELEM[bf.name]
        return lambda v: mx_block(v, elem, sr or "floor")
    if bf.family == "nvfp4":
        finite = x[np.isfinite(x)]
        s_enc = nvfp4_tensor_scale(max((abs(Fraction(float(v))) for v in finite.flat), default=Fraction(0)))
        return lambda v: nvfp4_block(v, s_enc)
    return lambda v: fp8_block(v, pow2)


@FUZZ
@given(case=block_case())
def test_quantize_matches_the_exact_reference_block_by_block(case):
    name, x, axis, block, sr, pow2 = case
    q = quantize(x, name, axis, block=block, scale_rounding=sr, pow2_scales=pow2)
    k = min(block or get_block_format(name).block, max(x.shape[axis], 1))
    assert q.elements.shape == x.shape and not q.elements.flags.writeable
    ref = _reference(name, x, axis, k, sr, pow2)
    dq = np.moveaxis(q.dequantize(), axis, -1)
    el = np.moveaxis(q.elements.astype(np.float64), axis, -1)
    under, sat = (np.moveaxis(a, axis, -1) for a in (q.stats.underflow, q.stats.saturated))
    for idx, vals in blocks_1d(x, axis, k):
        r = ref(vals)
        *lead, j = idx
        sl = (*lead, slice(j * k, j * k + len(vals)))
        assert same(dq[sl], r.dequant), (idx, vals)
        if r.scale is not None:
            assert same(el[sl], r.elements), (idx, vals)
            assert (under[idx], sat[idx]) == (r.underflow, r.saturated), (idx, vals)


@FUZZ
@given(data=st.data())
def test_quantize_with_junk_arguments_is_one_error_naming_it(data):
    x = np.linspace(-2, 2, 64, dtype=np.float32).reshape(2, 32)
    arg = data.draw(st.sampled_from(["fmt", "axis", "block", "scale_rounding", "rounding", "pow2_scales", "seed",
                                     "rng"]))
    junk = data.draw(st.sampled_from([None, -1, 0, 2.5, "x", (0, 4), (4, 4, 4), [16, 16], True, np.nan, 10**12,
                                      "nearest", "floor"]))
    kwargs = {"fmt": "mxfp8", "axis": -1, "rounding": "stochastic", arg: junk}
    fmt = kwargs.pop("fmt")
    try:
        q = quantize(x, fmt, **kwargs)
    except ALLOWED as e:
        assert one_line(e, arg, repr(junk), str(junk)), (arg, junk, str(e))
        return
    assert q.dequantize().shape == x.shape  # accepted: then it is a working result


# -------------------------------------------------------------------- BlockScaling

RECIPE_FIELDS = {
    "format": st.sampled_from(BLOCK_NAMES + ["fp16", "mxfp9", 3]),
    "grad_format": st.sampled_from([None, "mxfp8_e5m2", "nvfp4", "fp8_block", "e5m2"]),
    "block": st.sampled_from([None, 1, 8, 32, 10**9, 0, -4, 2.0, (32, 32), "32"]),
    "weight_block": st.sampled_from([None, 16, (16, 16), [8, 8], (16, 0), (1, 2, 3), "16"]),
    "scale_rounding": st.sampled_from([None, *SCALE_ROUNDINGS, "round"]),
    "pow2_scales": st.sampled_from([False, True, "False", 1]),
    "grad_rounding": st.sampled_from(["nearest", "stochastic", "up"]),
    "hadamard": st.sampled_from([False, True, "yes"]),
    "hadamard_seed": st.sampled_from([0, 7, -1, 1.5, None]),
    "accumulate": st.sampled_from([None, "bfloat16", 13, 0, "fp17", True]),
    "promote_every": st.sampled_from([None, 1, 128, 0, True]),
}


@FUZZ
@given(data=st.data())
def test_block_scaling_builds_and_trains_or_names_the_bad_field(data):
    chosen = data.draw(st.lists(st.sampled_from(sorted(RECIPE_FIELDS)), max_size=3, unique=True))
    kwargs = {f: data.draw(RECIPE_FIELDS[f], label=f) for f in chosen}
    try:
        r = BlockScaling(**kwargs)
    except ALLOWED as e:
        assert one_line(e, *kwargs, "format"), (kwargs, str(e))
        return
    fpsim.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16, seed=1))
    convert(model, r)
    x = fpsim.tensor(np.linspace(-1, 1, 64, dtype=np.float32).reshape(4, 16))
    ops.sum(model(x)).backward()  # the first backward raises nothing the constructor let through
    assert model[0].weight.grad.shape == (16, 16)


# -------------------------------------------------------------------- transformer ops against float64

SHAPES = hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5)


@FUZZ
@given(x=hnp.arrays(np.float32, SHAPES, elements=st.floats(-20, 20, width=32)), data=st.data(),
       fmt=st.sampled_from(["float32", "float16", "bfloat16"]))
def test_softmax_log_softmax_and_mean_match_float64_to_one_rounding(x, data, fmt):
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    t = fpsim.tensor(x, fmt)
    x64 = t.numpy().astype(np.float64)
    eps = fpsim.get_format(fmt).eps
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's "mean of empty slice": NaN is the answer
        z = x64 - (x64.max(axis=axis, keepdims=True) if x.shape[axis] else 0)
        sm = np.exp(z) / np.exp(z).sum(axis=axis, keepdims=True)
        lsm = z - np.log(np.exp(z).sum(axis=axis, keepdims=True))
        mean = x64.mean(axis=axis)
    for got, want in ((ops.softmax(t, axis), sm), (ops.log_softmax(t, axis), lsm), (ops.mean(t, axis), mean)):
        g = got.numpy().astype(np.float64)
        assert g.shape == want.shape
        assert np.array_equal(np.isnan(g), np.isnan(want))  # NaN exactly where float64 has it (a mean of nothing)
        ok = ~np.isnan(want)
        # one rounding into fmt of a float32 computation: within 2 eps relative, plus float32's own error
        tol = 2 * eps * np.abs(want[ok]) + 4 * 2.0**-23 * np.abs(want[ok]).max(initial=1.0)
        assert np.all(np.abs(g[ok] - want[ok]) <= tol), (got, want)


@FUZZ
@given(tq=st.integers(0, 4), tk=st.integers(0, 4), d=st.integers(1, 4), causal=st.booleans(),
       seed=st.integers(0, 100))
def test_attention_matches_pytorch_including_empty_queries_and_keys(tq, tk, d, causal, seed):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((1, tq, d), (1, tk, d), (1, tk, 3)))
    tq_, tk_, tv_ = (torch.tensor(a, dtype=torch.float64) for a in (q, k, v))
    mask = None
    if causal and tq and tk:
        mask = np.tril(np.ones((tq, tk), bool))
    want = torch.nn.functional.scaled_dot_product_attention(
        tq_, tk_, tv_, attn_mask=None if mask is None else torch.tensor(mask)).numpy()
    if mask is not None:  # a row with no key allowed: fpsim gives zeros, as PyTorch's fused kernels
        want[:, ~mask.any(axis=-1)] = 0
    got = ops.scaled_dot_product_attention(*(fpsim.tensor(a) for a in (q, k, v)), attn_mask=mask).numpy()
    assert got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-6)


# -------------------------------------------------------------------- transformer modules

GPT_FIELDS = {
    "d_model": st.sampled_from([8, 16, 0, 7, 2.5]),
    "n_heads": st.sampled_from([1, 2, 4, 3, -1]),
    "n_layers": st.sampled_from([1, 2, 0]),
    "fmt": st.sampled_from(["float32", "fp16", "bf16", "mxfp8", "nvfp4", "fp4", "fp17", None]),
    "seed": st.sampled_from([0, 5, -1, 1.5, "3", None]),
    "qk_scale": st.sampled_from([None, 0.25, 1.0, "a", float("nan"), float("inf")]),
    "ln_acc": st.sampled_from([None, "input", "float16", "bogus", "fp4"]),
    "attn_stable": st.sampled_from([True, False, "no"]),
    "mask_value": st.sampled_from([None, -65504.0, float("-inf"), "x", float("nan")]),
    "tied": st.sampled_from([False, True, "no"]),
    "emb_std": st.sampled_from([1.0, 0.02, -1.0, float("nan")]),
}


@FUZZ
@given(data=st.data())
def test_tinygpt_builds_and_runs_or_names_the_bad_knob(data):
    chosen = data.draw(st.lists(st.sampled_from(sorted(GPT_FIELDS)), max_size=3, unique=True))
    kwargs = {f: data.draw(GPT_FIELDS[f], label=f) for f in chosen}
    kwargs.setdefault("d_model", 8)
    kwargs.setdefault("n_heads", 2)
    try:
        model = nn.TinyGPT(11, 6, **kwargs)
    except ALLOWED as e:
        assert one_line(e, *kwargs, "vocab_size", "context"), (kwargs, str(e))
        return
    ids = np.random.default_rng(0).integers(0, 11, (2, 5))
    logits = model(ids)
    assert logits.shape == (2, 5, 11)
    nn.cross_entropy(logits.reshape(10, 11), ids.reshape(-1)).backward()  # the first backward: no surprise


# -------------------------------------------------------------------- the tracer against a replay

CHAIN_OPS = {"mul": lambda t, c: t * c, "exp": lambda t, c: ops.exp(t), "sq": lambda t, c: t * t,
             "log": lambda t, c: ops.log(t), "div": lambda t, c: t / c, "sub": lambda t, c: t - t,
             "softmax": lambda t, c: ops.softmax(t, -1), "sum": lambda t, c: ops.sum(t, -1, keepdims=True)}
OP_NAMES = {"mul": "mul", "exp": "exp", "sq": "mul", "log": "log", "div": "div", "sub": "sub", "softmax": "softmax",
            "sum": "sum"}


@FUZZ
@given(x=hnp.arrays(np.float32, (2, 3), elements=st.floats(-300, 300, width=32)),
       chain=st.lists(st.tuples(st.sampled_from(sorted(CHAIN_OPS)), st.sampled_from([0.0, 1e-8, 3.0, 300.0])),
                      min_size=1, max_size=6),
       fmt=st.sampled_from(["float16", "bfloat16", "float8_e4m3fn"]))
def test_tracer_names_the_first_op_a_step_by_step_replay_finds(x, chain, fmt):
    def run():
        t, first = fpsim.tensor(x, fmt), None
        for i, (name, c) in enumerate(chain):
            before = np.isfinite(t.numpy().astype(np.float64)).all()
            t = CHAIN_OPS[name](t, c)
            if first is None and before and not np.isfinite(t.numpy().astype(np.float64)).all():
                first = i
        return first

    with fpsim.trace_nonfinite() as tr:
        first = run()
    got = tr.first_nonfinite()
    if first is None:
        assert got is None or not np.isfinite(x).all()
    else:
        assert got is not None and got.op == OP_NAMES[chain[first][0]] and got.direction == "forward", (got, first)


# -------------------------------------------------------------------- backend moves

@FUZZ
@given(x=hnp.arrays(np.float32, (3, 4), elements=st.floats(-100, 100, width=32)),
       fmt=st.sampled_from(["float32", "float16", "bfloat16", "float8_e4m3fn"]),
       hops=st.lists(st.sampled_from(["numpy", "numpy-f32"]), min_size=1, max_size=4),
       where=st.integers(0, 3))
def test_moves_between_backends_change_no_value_and_no_gradient(x, fmt, hops, where):
    def loss(moves):
        w = fpsim.tensor(x, fmt, requires_grad=True)
        t = w
        for i, step in enumerate([ops.tanh, lambda u: u * u, ops.sigmoid, lambda u: ops.sum(u)]):
            if moves and i == where:
                for b in hops:
                    t = t.to(backend=b)
            t = step(t)
        t.backward()
        return t, w

    (a, wa), (b, wb) = loss(False), loss(True)
    assert a.numpy().tobytes() == b.to(backend="numpy").numpy().tobytes()
    assert wb.grad.backend.name == "numpy" and wa.grad.numpy().tobytes() == wb.grad.numpy().tobytes()


# -------------------------------------------------------------------- checkpoints of block and transformer models

def _gpt(seed):
    return nn.TinyGPT(11, 6, d_model=8, n_heads=2, n_layers=1, fmt="bfloat16", seed=seed)


def _blocky(seed):
    model = nn.MLP([8, 16, 4], fmt="float16", seed=seed)
    convert(model, BlockScaling("nvfp4", weight_block=(16, 16)))
    return model


def _bits(model):
    return {k: v.tobytes() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("models")
    out = {}
    for name, make in (("gpt", _gpt), ("blocky", _blocky)):
        m = make(0)
        out[name] = (checkpoint.save(tmp / f"{name}.npz", m).read_bytes(), _bits(m))
    return _Saved((tmp, out))


class _Saved(tuple):
    def __repr__(self):  # Hypothesis prints its arguments: not the files' bytes
        return "<saved models>"


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data(), which=st.sampled_from([("gpt", _gpt), ("blocky", _blocky)]))
def test_block_and_transformer_checkpoints_load_whole_or_change_nothing(saved_models, data, which):
    import io

    tmp, saved = saved_models
    name, make = which
    raw, bits = saved[name]
    with np.load(io.BytesIO(raw), allow_pickle=False) as z:
        entries = {k: z[k] for k in z.files}
    if data.draw(st.booleans(), label="edit"):
        key = data.draw(st.sampled_from(sorted(entries)), label="key")
        how = data.draw(st.sampled_from(["drop", "format", "flip", "reshape"]), label="how")
        if how == "drop":
            del entries[key]
        elif how == "format":
            entries[key.split("#")[0] + "#fmt"] = np.asarray(data.draw(st.sampled_from(
                ["float16", "float4_e2m1fn", "float6_e3m2fn", "float8_e8m0fnu", "mxfp8", "float8_e5m2"])))
        elif how == "flip" and entries[key].dtype.kind == "u" and entries[key].size:
            a = entries[key].copy()
            a.reshape(-1)[data.draw(st.integers(0, a.size - 1))] ^= a.dtype.type(1)
            entries[key] = a
        else:
            entries[key] = np.zeros((entries[key].size + 1,), entries[key].dtype)
    path = tmp / f"{name}-edited.npz"
    np.savez(path, **entries)
    model = make(1)
    before = _bits(model)
    try:
        checkpoint.load(path, model)
    except ALLOWED as e:
        assert one_line(e, str(path), "left unchanged"), str(e)
        assert _bits(model) == before
        return
    with np.load(path, allow_pickle=False) as z:
        want = {k[len("model/"):]: z[k].tobytes() for k in z.files if k.startswith("model/") and "#" not in k}
    assert _bits(model) == want  # loaded: exactly what the file holds
    if want == {k: v for k, v in bits.items()}:
        x = np.random.default_rng(0).integers(0, 11, (1, 4)) if name == "gpt" else \
            fpsim.tensor(np.ones((2, 8), np.float32), "float16")
        assert np.all(np.isfinite(model(x).numpy().astype(np.float64))) or name == "blocky"


def test_the_block_reference_knows_a_scale_of_zero_encodes_by_zero():
    r = nvfp4_block([1e-6] * 16, Fraction(448 * 6))
    assert r.scale == 0 and r.elements == [0.0] * 16 and r.underflow == 16 and r.saturated == 0
    assert math.isclose(float(nvfp4_tensor_scale(Fraction(1))), 2688.0)
