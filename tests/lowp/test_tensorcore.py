"""fpsim.tensorcore.matmul against MMA-Sim (Microsoft's bit-accurate tensor-core model,
``pip install mmasim``), bit for bit: every architecture at every input type and accumulator it
takes, on random data, long K, mixed signs, cancellation, subnormal products, zeros and
non-finite inputs.  The MMA-Sim instructions are built from its own ISA tables (its parameters,
not fpsim's), and fed the whole K at once: its ``dpa`` chains the steps itself."""

import ml_dtypes
import numpy as np
import pytest
from support.tensorcore_reference import _NP, bits, mmasim

from fpsim import tensorcore as tc


def check(arch, a, b, c=None, fa=None, fb=None):
    fa = fa or {v: k for k, v in _NP.items()}[a.dtype.type]
    fb = fb or {v: k for k, v in _NP.items()}[b.dtype.type]
    c = np.zeros((a.shape[0], b.shape[1]), np.float32) if c is None else c
    got = tc.matmul(a, b, c, arch=arch)
    want = mmasim(arch, a, b, c, fa, fb)
    assert got.dtype == want.dtype
    bad = bits(got) != bits(want)
    assert not bad.any(), f"{bad.sum()} of {bad.size} differ; first: fpsim {got[bad][:4]} MMA-Sim {want[bad][:4]}"
    return got


CASES = [(arch, f) for arch, at in tc.ARCHITECTURES.items() for f in at.inputs]


def _data(rng, shape, fmt, kind="normal"):
    x = rng.standard_normal(shape)
    if kind == "wide":  # exponents spread over most of the format's range
        x = x * np.exp2(rng.integers(-12, 6, shape))
    if kind == "positive":
        x = np.abs(x)
    return x.astype(_NP[fmt])


@pytest.mark.parametrize("arch,fmt", CASES)
@pytest.mark.parametrize("out", ["float32", "float16"])
def test_random_data_every_arch_and_input(arch, fmt, out):
    rng = np.random.default_rng(hash((arch, fmt, out)) % 2**32)
    a = _data(rng, (8, 100), fmt, "wide")
    b = _data(rng, (100, 8), fmt)
    c = (rng.standard_normal((8, 8)) * 4).astype(out)
    if out == "float16" and fmt in ("bfloat16", "tf32"):  # no such instruction
        with pytest.raises(ValueError, match="accumulate in float32 only"):
            tc.matmul(a, b, c, arch=arch)
        return
    check(arch, a, b, c)


@pytest.mark.parametrize("arch", ["ada", "hopper", "blackwell"])
def test_fp8_mixed_e4m3_e5m2(arch):
    rng = np.random.default_rng(1)
    a = _data(rng, (8, 96), "float8_e4m3fn", "wide")
    b = _data(rng, (96, 8), "float8_e5m2", "wide")
    check(arch, a, b)
    check(arch, a, b, np.full((8, 8), 3.0, np.float16))


@pytest.mark.parametrize("arch,fmt,k", [("hopper", "float8_e4m3fn", 8192), ("hopper", "bfloat16", 4096),
                                        ("ada", "float8_e5m2", 4096), ("ampere", "float16", 2048),
                                        ("volta", "float16", 1024)])
def test_long_k_all_positive_and_zero_mean(arch, fmt, k):
    rng = np.random.default_rng(2)
    for kind in ("positive", "normal"):
        a = _data(rng, (3, k), fmt, kind)
        b = _data(rng, (k, 2), fmt, kind)
        check(arch, a, b)


@pytest.mark.parametrize("arch,fmt", CASES)
def test_cancellation_and_zeros(arch, fmt):
    rng = np.random.default_rng(3)
    x = _data(rng, (4, 32), fmt, "wide")
    a = np.concatenate([x, x], axis=1)  # a row: x then x again
    b = np.concatenate([_data(rng, (32, 4), fmt), np.zeros((32, 4), _NP[fmt])], axis=0)
    b[32:] = (-b[:32].astype(np.float32)).astype(_NP[fmt])  # ... times b then -b: exactly 0 in exact arithmetic
    a[0, :] = 0  # a zero row; a zero column of b
    b[:, 1] = 0
    got = check(arch, a, b)
    assert np.all(got[0] == 0) and np.all(got[:, 1] == 0) and not np.signbit(got[got == 0]).any()  # +0


@pytest.mark.parametrize("arch,fmt", CASES)
def test_subnormal_products_and_tiny_accumulator(arch, fmt):
    np_t = _NP[fmt]
    tiny = float(ml_dtypes.finfo(np_t).smallest_subnormal) if fmt != "tf32" else 2.0**-140
    rng = np.random.default_rng(4)
    a = (rng.integers(1, 8, (4, 40)) * tiny).astype(np_t)
    b = (rng.integers(-8, 8, (40, 4)) * tiny * 2**rng.integers(0, 4, (40, 4))).astype(np_t)
    a[1] = _data(rng, (40,), fmt)  # one row of normal values against the subnormal ones
    c = np.array([[0, 2.0**-140, -(2.0**-126), 1e-30]] * 4, np.float32)
    check(arch, a, b, c)
    if fmt not in ("bfloat16", "tf32"):
        check(arch, a, b, np.array([[0, 2.0**-24, -(2.0**-20), 6e-5]] * 4, np.float16))


@pytest.mark.parametrize("arch,fmt", CASES)
def test_non_finite_inputs(arch, fmt):
    np_t = _NP[fmt]
    rng = np.random.default_rng(5)
    a = _data(rng, (6, 48), fmt)
    b = _data(rng, (48, 6), fmt)
    a[0, 3] = np.nan
    b[5, 1] = np.inf if fmt != "float8_e4m3fn" else np.nan
    a[2, 40] = np.inf if fmt != "float8_e4m3fn" else np.nan
    b[40, 2] = 0  # inf * 0
    c = np.zeros((6, 6), np.float32)
    c[4, 4], c[3, 3] = np.inf, -np.inf
    check(arch, a, b, c)
    if fmt not in ("bfloat16", "tf32"):
        check(arch, a, b, np.full((6, 6), 60000, np.float16))  # float16 overflow of the accumulator
    if fmt != "float8_e4m3fn":
        a2 = np.zeros((2, 16), np_t)
        b2 = np.zeros((16, 2), np_t)
        a2[0, 0], b2[0, 0], a2[0, 1], b2[1, 0] = np.inf, 1, -np.inf, 1  # inf - inf
        check(arch, a2, b2)


def test_float32_overflow_of_the_sum_is_inf():
    a = np.full((2, 8), 2.0**63, np.float32)  # tf32: 8 products of 2^126 add to 2^129
    b = np.full((8, 2), 2.0**63, np.float32)
    b[:, 1] *= -1
    got = check("hopper", a, b, fa="tf32", fb="tf32")
    assert np.all(got[:, 0] == np.inf) and np.all(got[:, 1] == -np.inf)


def test_e8m13_output_keeps_13_fraction_bits():
    # 1 + 2^-13 survives, 1 + 2^-14 does not (rounded toward zero into e8m13)
    a = np.array([[1.0, 2.0**-7]], ml_dtypes.float8_e4m3fn)
    for k, want in ((6, 1 + 2.0**-13), (7, 1.0)):
        b = np.array([[1.0], [2.0**-k]], ml_dtypes.float8_e4m3fn)
        got = tc.matmul(a, b, arch="hopper")
        assert got[0, 0] == np.float32(want)
        assert got[0, 0] == mmasim("hopper", a, b, np.zeros((1, 1), np.float32), "float8_e4m3fn", "float8_e4m3fn")


def test_batched_operands_broadcast():
    rng = np.random.default_rng(6)
    a = _data(rng, (3, 4, 40), "float16")
    b = _data(rng, (40, 5), "float16")
    got = tc.matmul(a, b, arch="ampere")
    for i in range(3):
        assert np.array_equal(bits(got[i]), bits(check("ampere", a[i], b)))


def test_promotion_is_a_float32_add_of_each_chunk():
    rng = np.random.default_rng(7)
    a = _data(rng, (4, 512), "float8_e4m3fn", "positive")
    b = _data(rng, (512, 4), "float8_e4m3fn", "positive")
    c = rng.standard_normal((4, 4)).astype(np.float32)
    total = c.copy()
    for k0 in range(0, 512, 128):
        total += mmasim("hopper", a[:, k0:k0 + 128], b[k0:k0 + 128], np.zeros((4, 4), np.float32),
                        "float8_e4m3fn", "float8_e4m3fn")
    got = tc.matmul(a, b, c, arch="hopper", promote_every=128)
    assert np.array_equal(bits(got), bits(total))
    exact = a.astype(np.float64) @ b.astype(np.float64) + c
    plain = tc.matmul(a, b, c, arch="hopper")
    assert np.all(np.abs(got - exact) < np.abs(plain - exact))  # promotion loses less than the chain


def test_bad_arguments_name_what_is_wrong():
    a = np.ones((2, 4), np.float16)
    with pytest.raises(ValueError, match="unknown tensor-core architecture 'pascal'"):
        tc.matmul(a, a.T, arch="pascal")
    with pytest.raises(ValueError, match="volta tensor cores do not take bfloat16"):
        tc.matmul(a.astype(ml_dtypes.bfloat16), a.T.astype(ml_dtypes.bfloat16), arch="volta")
    with pytest.raises(ValueError, match="must be the same format"):
        tc.matmul(a, a.T.astype(ml_dtypes.bfloat16), arch="hopper")
    with pytest.raises(ValueError, match="a must be a float16"):
        tc.matmul(a.astype(np.float64), a.T, arch="hopper")
    with pytest.raises(ValueError, match="do not fit"):
        tc.matmul(a, a, arch="hopper")
    with pytest.raises(ValueError, match="promote_every must be a positive multiple"):
        tc.matmul(a, a.T, promote_every=100)
    with pytest.raises(ValueError, match="c must be a float32 or float16"):
        tc.matmul(a, a.T, np.zeros((2, 2)))
    with pytest.raises(ValueError, match="ampere tensor cores do not take float8_e4m3fn"):
        tc.instruction("ampere", "float8_e4m3fn", "float8_e4m3fn")


@pytest.mark.parametrize("arch,name", [("hopper", "Hopper"), ("blackwell", "Blackwell")])
@pytest.mark.parametrize("fmt", ["float16", "bfloat16", "tf32"])
def test_mma_instructions_match_wgmma_and_tcgen05_parameters(arch, name, fmt):
    """Hopper's and Blackwell's warp-level mma (not only wgmma / tcgen05.mma) add the same way."""
    from support.tensorcore_reference import _PTX, _to_torch, nv, torch

    rng = np.random.default_rng(8)
    a, b = _data(rng, (8, 80), fmt, "wide"), _data(rng, (80, 8), fmt)
    t = _PTX[fmt]
    k = 8 if fmt == "tf32" else 16
    d = nv.MMA(name, f"m16n8k{k}.f32.{t}.{t}.f32")(_to_torch(a), _to_torch(b), torch.zeros((8, 8)))
    assert np.array_equal(bits(tc.matmul(a, b, arch=arch)), bits(d.numpy()))


def test_empty_operands_give_empty_or_unchanged_results():
    assert tc.matmul(np.zeros((0, 5), np.float16), np.zeros((5, 3), np.float16)).shape == (0, 3)
    assert tc.matmul(np.zeros((0, 2, 5), np.float16), np.zeros((5, 3), np.float16)).shape == (0, 2, 3)
    c = np.full((2, 3), 1.25, np.float32)
    assert np.array_equal(tc.matmul(np.zeros((2, 0), np.float16), np.zeros((0, 3), np.float16), c), c)


def test_matmul_takes_fpsim_tensors_as_their_stored_values():
    """Two fpsim Tensors were "setting an array element with a sequence"; now each is read as its
    stored values, so the result is the arrays' result bit for bit (a float32 tensor is tf32 input)."""
    import fpsim

    rng = np.random.default_rng(3)
    for fmt in ("bfloat16", "float8_e4m3fn", "float32"):
        a = fpsim.tensor(rng.standard_normal((3, 40)), fmt)
        b = fpsim.tensor(rng.standard_normal((40, 5)), fmt)
        c = rng.standard_normal((3, 5)).astype(np.float32)
        want = tc.matmul(a.numpy(), b.numpy(), c, arch="hopper")
        assert bits(tc.matmul(a, b, fpsim.tensor(c), arch="hopper")).tolist() == bits(want).tolist()
    with pytest.raises(ValueError, match="a must be a float16, bfloat16, float32 .* array, got list"):
        tc.matmul([[1.0]], np.ones((1, 1), np.float16))


def test_an_emulate_object_can_be_entered_again_nested_and_from_two_threads():
    """tensorcore.emulate objects are re-entrant as rounding_mode's are: the same object nested, one
    block after another, and in two threads at once, each thread's setting its own."""
    import threading

    from fpsim import state

    e, v = tc.emulate("hopper", promote_every=128), tc.emulate("volta")
    with e:
        with v:
            assert state.tensor_core() == ("volta", None)
            with e:
                assert state.tensor_core() == ("hopper", 128)
            assert state.tensor_core() == ("volta", None)
        assert state.tensor_core() == ("hopper", 128)
    with e:
        assert state.tensor_core() == ("hopper", 128)
    assert state.tensor_core() is None
    seen, inside, leave = {}, threading.Barrier(2), threading.Event()

    def run(name, obj):
        with obj:
            inside.wait()
            seen[name] = state.tensor_core()
            leave.wait()
        seen[name + " after"] = state.tensor_core()

    threads = [threading.Thread(target=run, args=(n, e)) for n in ("one", "two")]
    for t in threads:
        t.start()
    while len(seen) < 2:
        threading.Event().wait(0.01)
    leave.set()
    for t in threads:
        t.join()
    assert seen == {"one": ("hopper", 128), "two": ("hopper", 128), "one after": None, "two after": None}
    with pytest.raises(RuntimeError, match="exited a block that was not entered"):
        e.__exit__(None, None, None)
    with pytest.raises(ValueError, match="promote_every"):
        tc.emulate("hopper", promote_every=0)
