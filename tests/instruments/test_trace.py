"""The first-non-finite tracer: it names the op that MADE an inf or NaN (not the ops that passed
it on), in which module and direction, tells a forward overflow from a loss-scaler overflow
from an unscaled backward overflow, keeps a frame of the roundings before it, reads as one
paragraph - and costs nothing once it is off."""

import numpy as np
import pytest

import fpsim
from fpsim import amp, nn, ops, optim, state
from fpsim.tensor import tensor
from fpsim.trace import BACKWARD, FORWARD, KINDS, SCALER, UPDATE, NonFiniteTracer

pytestmark = pytest.mark.both_backends  # every test here runs on numpy and numpy-f32 (conftest.py)


def test_forward_overflow_is_found_at_the_op_that_made_it():
    x = tensor(np.array([0.5, 100.0, -200.0, 1.0]), "float16", requires_grad=True)
    with fpsim.trace_nonfinite() as t:
        y = x * 1000.0  # 1e5 and -2e5 pass float16's max: inf, -inf
        z = (y + 1.0).exp()  # its input holds inf already: not an origin, though exp(501) overflows too
        z.sum()
    rec = t.first_nonfinite()
    assert (rec.kind, rec.direction, rec.op, rec.fmt, rec.n, rec.n_inf, rec.n_nan) == (
        FORWARD, "forward", "mul", "float16", 4, 2, 0)
    assert rec.max_finite_before == 200000.0 and rec.nonfinite_before == 0
    assert t.counts == {FORWARD: 1, SCALER: 0, BACKWARD: 0, UPDATE: 0}
    text = str(rec)
    assert "\n" not in text and "forward op 'mul'" in text and "past float16's max 65504" in text
    assert "loss scaling cannot cure it" in text and "2 inf of 4 values" in text


def test_the_report_for_a_reader_wraps_between_words_and_says_what_the_one_line_form_says():
    """``report()`` is ``str()`` for a person: the same words, in lines of at most 100 characters
    (or ``width``) broken between words - no number or name split - the frame one rounding a line."""
    x = tensor(np.array([0.5, 100.0, -200.0, 1.0]), "float16", requires_grad=True)
    with fpsim.trace_nonfinite(frame=3) as t:
        h = (x * 0.5) + 1.0
        (h * 2000.0).sum()
    rec = t.first_nonfinite()
    one_line = str(rec)
    for width in (100, 60):
        lines = rec.report(width).splitlines()
        assert max(len(line) for line in lines) <= width
        head = lines[:lines.index("The roundings just before it:")]
        assert len(head) > len(one_line) // 2 // width  # wrapped, not one long line
        said = " ".join(" ".join(head).split())
        assert " ".join(one_line.split()).startswith(said + " The roundings just before it: ")
        assert "past float16's max 65504" in said and "2 inf of 4 values" in said
        frame_lines = [line for line in lines if line.startswith("  ")]
        assert [" ".join(line.split()) for line in frame_lines] == [" ".join(str(f).split()) for f in rec.frame]
    assert len(rec.frame) == 2


def test_the_module_path_and_the_frame():
    m = nn.TinyGPT(11, 8, d_model=16, n_layers=2, n_heads=2, emb_std=300.0, ln_acc="input")
    m.to("float16")
    ids = np.random.default_rng(0).integers(0, 11, (2, 8))
    with fpsim.monitor(trace_nonfinite=True) as mon:
        nn.cross_entropy(m(ids).reshape(-1, 11).float(), ids.reshape(-1)).backward()
    rec = mon.first_nonfinite()
    # the float16 running sum of squares is rounded where the hooks see it: the tracer names the
    # accumulator of layer_norm as the place the inf was made
    assert (rec.kind, rec.scope, rec.op, rec.where) == (FORWARD, "blocks.0.ln1", "layer_norm",
                                                        "blocks.0.ln1.accumulator")
    # the frame: the residual add that made the large inputs, then the accumulator's partial sums
    assert any(e.op == "add" and e.abs_max > 300 for e in rec.frame)
    assert rec.frame[-1].op == "layer_norm" and rec.frame[-1].target == "accumulator"
    assert mon.totals(op="layer_norm")["overflow"] > 0  # the monitor counted as well
    with fpsim.autocast("float16"), fpsim.trace_nonfinite() as t:  # layer_norm in float32: nothing
        nn.cross_entropy(m.to("float32")(ids).reshape(-1, 11), ids.reshape(-1)).backward()
    assert t.first_nonfinite() is None


def test_intended_minus_inf_is_not_an_overflow():
    q = tensor(np.random.default_rng(1).standard_normal((2, 5, 4)), "float16", requires_grad=True)
    with fpsim.trace_nonfinite() as t:
        ops.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    assert t.first_nonfinite() is None and repr(t) == "<NonFiniteTracer: nothing non-finite yet>"


def _scaled_step(model, opt, scaler, x):
    loss = ops.mean(model(x) * 1.0)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()


def test_loss_scaler_overflow_is_named_and_told_apart():
    """float16 loss times 2**16 is inf already in the backward of the scaler's multiply: normal,
    the step is skipped.  A later forward overflow is still found, and include_scaler=False
    skips to it."""
    model = nn.Linear(4, 1, fmt="float16", seed=0)
    opt = optim.SGD(model.parameters(), lr=0.1)
    scaler = amp.GradScaler()
    x = tensor(np.ones((3, 4)), "float16")
    with fpsim.trace_nonfinite() as t:
        _scaled_step(model, opt, scaler, x)
        assert scaler.last_step_skipped(opt)
        _scaled_step(model, opt, scaler, x * 30000.0)  # forward: 30000 * 4 weights ... overflows
    rec = t.first_nonfinite()
    assert (rec.kind, rec.direction, rec.scope, rec.loss_scale) == (SCALER, "backward", "loss_scale", 65536.0)
    assert "loss-scaler overflow" in str(rec) and "normal" in str(rec) and "65536" in str(rec)
    later = t.first_nonfinite(include_scaler=False)
    assert later is not None and later.kind in (FORWARD,) and later.step == 1
    assert t.first_nonfinite(FORWARD) == later
    with pytest.raises(ValueError, match="unknown kind 'sideways'"):
        t.first_nonfinite("sideways")


def test_unscaled_backward_overflow():
    x = tensor(np.full(3, 0.01), "float16", requires_grad=True)
    with fpsim.trace_nonfinite() as t:
        ((x * 1000.0).sum() * 100.0).backward()  # forward finite; the gradient 1e5 is not
    rec = t.first_nonfinite()
    assert (rec.kind, rec.direction, rec.op, rec.loss_scale) == (BACKWARD, "backward", "mul", None)
    assert "no loss scaler in play" in str(rec)


def test_update_overflow():
    p = tensor(np.full(2, 60000.0), "float16", requires_grad=True)
    opt = optim.SGD([p], lr=1.0)
    p.grad = tensor(np.full(2, -10000.0), "float16")
    with fpsim.trace_nonfinite() as t:
        opt.step()  # 60000 + 10000 = 70000: inf in float16
    rec = t.first_nonfinite()
    assert rec.kind == UPDATE and rec.target == p.name and rec.n_inf == 2


def test_steps_are_counted_or_set():
    t = NonFiniteTracer()
    x = tensor(np.ones(2), "float16", requires_grad=True)
    with t:
        for i in range(3):
            t.set_step(10 + i)
            y = x * (1.0 if i < 2 else 1e6)
            y.sum().backward()
    assert t.first_nonfinite().step == 12
    auto = NonFiniteTracer()
    with auto:
        for i in range(3):
            (x * (1.0 if i < 2 else 1e6)).sum().backward()
    assert auto.first_nonfinite().step == 2
    auto.reset()
    assert auto.first_nonfinite() is None and auto.step == 0


def test_off_means_no_hook():
    before = list(state.HOOKS)
    with fpsim.monitor(trace_nonfinite=True), fpsim.trace_nonfinite():
        assert len(state.HOOKS) == len(before) + 2
    assert state.HOOKS == before
    with pytest.raises(RuntimeError, match="trace_nonfinite=True"):
        fpsim.monitor().first_nonfinite()
    assert set(KINDS) == {FORWARD, SCALER, BACKWARD, UPDATE}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_finiteness_on_bit_patterns(dtype):
    """The tracer tests 8- and 16-bit storage on bit patterns: every fp8 pattern, and every
    16-bit pattern with the exponent all ones or all zeros plus random others, one at a time."""
    import ml_dtypes

    from fpsim.backend import get_backend
    from fpsim.trace import _all_finite, _kinds

    dt = np.dtype(getattr(ml_dtypes, dtype, None) or dtype)
    u = "uint8" if dt.itemsize == 1 else "uint16"
    if dt.itemsize == 1:
        pats = np.arange(256, dtype=u)
    else:
        rng = np.random.default_rng(0)
        pats = np.concatenate([np.arange(0x7C00 if dtype == "float16" else 0x7F80, 0x10000, dtype=u),
                               np.arange(0, 0x400, dtype=u), rng.integers(0, 2**16, 3000).astype(u)])
    vals = pats.view(dt)
    want = np.isfinite(vals.astype(np.float32))
    be = get_backend(None)
    assert [_all_finite(vals[i:i + 1], be) for i in range(vals.size)] == want.tolist()
    assert _all_finite(vals[want], be) and not _all_finite(vals, be)
    f32 = vals.astype(np.float32)
    for i in np.flatnonzero(~want):
        k = "NaN" if np.isnan(f32[i]) else "+inf" if f32[i] > 0 else "-inf"
        assert _kinds(vals[i:i + 1], be) == (k,), (dtype, hex(int(pats[i])))
    assert _kinds(vals[want], be) == () and set(_kinds(vals, be)) == set(_kinds(f32, be))
