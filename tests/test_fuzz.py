"""Fuzzing the public surface (issue 14): random formats, shapes, dtypes, special values and
argument mixes for the format API; random corruption and truncation of every file fpsim reads;
random command lines built from the parser's own options.

The property everywhere: either a result that matches the reference (gfloat for rounding, the
file's original contents, the saved state), or ONE ``ValueError`` / ``TypeError`` / ``OSError``
whose message names what was wrong - never another exception type, never a traceback from the
CLI, never a partially written file, never a changed model after a failed load.

Adding a format API (a block-scaled ``quantize``, say) is one entry in ``FORMAT_APIS``: how to
call it and how to compute its reference from float64 values.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import warnings

import ml_dtypes
import numpy as np
import pytest
from helpers import same_bits

from fpsim import cast as fp_cast
from fpsim import checkpoint, classify, nn, round_to
from fpsim.formats import ALL_FORMATS, FORMATS, get_format
from fpsim.formats.table import _ALIASES
from fpsim.tools import cli
from fpsim.tools.audit.tensorfiles import read_tensors

hypothesis = pytest.importorskip("hypothesis")
gfloat = pytest.importorskip("gfloat")
from gfloat import RoundMode, round_ndarray  # noqa: E402
from gfloat.formats import (  # noqa: E402
    format_info_bfloat16,
    format_info_binary16,
    format_info_binary32,
    format_info_ocp_e4m3,
    format_info_ocp_e5m2,
)
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
ALLOWED = (ValueError, TypeError, OSError)

GFLOAT = {"float32": format_info_binary32, "float16": format_info_binary16, "bfloat16": format_info_bfloat16,
          "float8_e4m3fn": format_info_ocp_e4m3, "float8_e5m2": format_info_ocp_e5m2}
NAMES = sorted(FORMATS) + sorted(a for a, n in _ALIASES.items() if n in FORMATS)  # the block formats: test_element_formats
SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 2.0**-149, 2.0**-24, 2.0**-25, 2.0**-133, 448.0, 464.0,
            465.0, 57344.0, 61440.0, 65504.0, 65520.0, 3.4e38, 1e300, -1e-300, 5e-324]


def named(exc: BaseException, *bad) -> bool:
    """The message names at least one of the bad things (its repr, its text or its name)."""
    msg = str(exc)
    return "\n" not in msg.strip() and any(str(b) in msg or repr(b) in msg for b in bad)


# -------------------------------------------------------------------- the format API and its references


def gfloat_round(x64, name, rounding, saturate):
    modes = {"nearest": RoundMode.TiesToEven, "toward_zero": RoundMode.TowardZero,
             "up": RoundMode.TowardPositive, "down": RoundMode.TowardNegative}
    with np.errstate(all="ignore"):
        return round_ndarray(GFLOAT[name], np.asarray(x64, np.float64), modes[rounding], saturate)


def ref_cast(x64, name, rounding, saturate):
    """The reference result(s) in the format's storage dtype: one array, or for stochastic
    rounding the two neighbours it may land on."""
    dt = FORMATS[name].dtype
    to = lambda r: np.asarray(r).astype(dt).reshape(np.shape(x64))  # noqa: E731 - exact: r is on the grid
    if rounding != "stochastic":
        return [to(gfloat_round(x64, name, rounding, saturate))]
    up, down = gfloat_round(x64, name, "up", saturate), gfloat_round(x64, name, "down", saturate)
    return [to(up), to(down)]


def check_cast(x64, got, name, rounding, saturate):
    refs = ref_cast(x64, name, rounding, saturate)
    assert got.dtype == FORMATS[name].dtype and got.shape == np.shape(x64)
    ok = np.zeros(got.shape, bool)
    for r in refs:
        ok |= same_bits(got, r).reshape(got.shape)  # (same_bits makes 0-d 1-d)
    assert ok.all(), (name, rounding, saturate, x64[~ok][:4], got[~ok][:4])


def check_classify(x64, c, name, rounding, saturate):
    f = FORMATS[name]
    (r,) = ref_cast(x64, name, "nearest" if rounding == "stochastic" else rounding, saturate)
    if rounding == "stochastic":
        r = c.rounded  # checked against both neighbours by check_cast; categories follow from it
    v = np.asarray(r).astype(np.float64)
    a = np.abs(v)
    want = np.select([a == 0, a < f.tiny, np.isinf(v), np.isnan(v)], [0, 1, 3, 4], default=2)
    assert np.array_equal(c.category, want)
    finite_in = np.isfinite(x64)
    assert np.array_equal(c.underflow, (a == 0) & (x64 != 0) & finite_in)
    if not saturate:
        assert np.array_equal(c.overflow, finite_in & ~np.isfinite(v))


def call_cast(x, name, rounding, saturate, seed):
    return fp_cast(x, name, rounding, saturate=saturate, seed=seed)


def call_round_to(x, name, rounding, saturate, seed):
    out = round_to(x, name, rounding, saturate=saturate, seed=seed)
    return np.asarray(out).astype(get_format(name).dtype)  # exact: the values are on the grid


def call_classify(x, name, rounding, saturate, seed):
    if rounding == "stochastic":
        return None  # classify takes no seed: its stochastic results are checked through cast
    return classify(x, name, rounding, saturate=saturate)


# (name, call, check): call(x, fmt, rounding, saturate, seed) -> result or None (not applicable);
# check(x64, result, fmt, rounding, saturate) asserts it against the reference
FORMAT_APIS = [
    ("cast", call_cast, check_cast),
    ("round_to", call_round_to, check_cast),
    ("classify", call_classify, check_classify),
]

def _arrays(dtype):
    """Arrays of ``dtype``: any of its values, the special values it can hold, and ordinary numbers."""
    width = np.dtype(dtype).itemsize * 8
    fits = [v for v in SPECIALS if not math.isfinite(v) or abs(v) <= float(np.finfo(dtype).max)]
    return hnp.arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
                      elements=st.one_of(st.floats(width=width), st.sampled_from(fits),
                                         st.floats(-1e4, 1e4, width=width)))


float_arrays = st.sampled_from([np.float64, np.float32, np.float16]).flatmap(_arrays)
rounding_modes = st.sampled_from(["nearest", "toward_zero", "stochastic"])


@FUZZ
@given(x=float_arrays, name=st.sampled_from(NAMES), rounding=rounding_modes, saturate=st.booleans(),
       seed=st.integers(0, 2**32))
def test_format_api_matches_gfloat(x, name, rounding, saturate, seed):
    canon = FORMATS[_ALIASES.get(name, name)].name
    if x.dtype == np.float16:
        x64 = x.astype(np.float64)
    else:
        with np.errstate(over="ignore"):
            x64 = x.astype(np.float64)
    for _api, call, check in FORMAT_APIS:
        got = call(x, name, rounding, saturate, seed)
        if got is not None:
            check(x64, got, canon, rounding, saturate)


@FUZZ
@given(x=float_arrays, rounding=rounding_modes, saturate=st.booleans())
def test_format_api_on_bfloat16_and_fp8_inputs(x, rounding, saturate):
    """Low-precision inputs widen exactly: the result is the reference's on the widened values."""
    for src in (ml_dtypes.bfloat16, ml_dtypes.float8_e5m2):
        with np.errstate(all="ignore"):
            lp = x.astype(src)
        for name in ("float8_e4m3fn", "float16"):
            check_cast(lp.astype(np.float64), fp_cast(lp, name, rounding, saturate=saturate, seed=1), name,
                       rounding, saturate)


junk_names = st.one_of(st.text(max_size=8), st.sampled_from(["fp17", "e4m3fnuz", "float64", "int8", "", "FP16 "]))
junk_inputs = st.one_of(
    st.sampled_from([None, "1.0", b"ab", object(), {1: 2}, [1, "a"], [[1, 2], [3]], 1 + 2j, True]),
    hnp.arrays(st.sampled_from([np.complex64, np.bool_, np.dtype("U3"), np.dtype("O")]), st.integers(0, 3)),
    st.integers(0, 3).map(lambda n: np.zeros(n, "V2")),  # raw bytes
)


@FUZZ
@given(name=junk_names)
def test_unknown_format_names_are_one_value_error_naming_them(name):
    if name in FORMATS or name in _ALIASES or name.strip().lower() in {n.lower() for n in NAMES}:
        return
    for api, call, _ in FORMAT_APIS:
        with pytest.raises(ValueError) as e:
            call(np.float32([1.0]), name, "nearest", False, 0)
        assert named(e.value, repr(name)), (api, str(e.value))


@FUZZ
@given(x=junk_inputs, name=st.sampled_from(NAMES))
def test_non_numeric_inputs_are_one_type_error_naming_what_came(x, name):
    for api, call, _ in FORMAT_APIS:
        try:
            call(x, name, "nearest", False, 0)
        except TypeError as e:
            what = getattr(x, "dtype", None) if isinstance(x, np.ndarray) else type(x).__name__
            assert named(e, what, "non-numbers"), (api, str(e))
        except ValueError as e:  # ragged nested lists: numpy's own shape complaint
            assert isinstance(x, list) and named(e, "shape", "inhomogeneous", "sequence"), (api, str(e))
        else:  # a bool is not a number to fpsim, nor is a complex; everything here is refused
            raise AssertionError(f"{api} accepted {x!r}")


@FUZZ
@given(rounding=st.one_of(st.text(max_size=6), st.sampled_from(["Nearest", "stochastic ", "up", None, 3])),
       seed=st.one_of(st.none(), st.integers(0, 5)))
def test_bad_rounding_modes_are_named(rounding, seed):
    if rounding in ("nearest", "toward_zero", "stochastic"):
        return
    for api, call, _ in FORMAT_APIS:
        with pytest.raises(ValueError) as e:
            call(np.float32([0.3]), "fp16", rounding, False, seed)
        assert named(e.value, repr(rounding)), (api, str(e.value))


@FUZZ
@given(seed=st.one_of(st.integers(-2**40, -1), st.floats(allow_nan=True), st.text(max_size=3), st.just(True)))
def test_bad_seeds_are_named(seed):
    for fn in (fp_cast, round_to):
        with pytest.raises(ValueError) as e:
            fn(np.float32([0.3]), "bf16", "stochastic", seed=seed)
        assert named(e.value, "seed") and named(e.value, repr(seed)), str(e.value)
    with pytest.raises(TypeError, match="rng must be a numpy Generator"):
        fp_cast(0.3, "bf16", "stochastic", rng=seed)


@FUZZ
@given(x=_arrays(np.float32),
       name=st.sampled_from(["float8_e4m3fn", "float8_e5m2"]),
       init=st.sampled_from([1.0, 2.0**-7, 2.0**10, 3.0, 1000.0]))
def test_per_tensor_quantize_matches_gfloat_with_saturation(x, name, init):
    from fpsim.lowp import quantize_fp8
    from fpsim.lowp.recipes import DelayedScaling
    from fpsim.lowp.scaling import ScalingState

    state = ScalingState("t", name, DelayedScaling(amax_init=False), init_scale=init)
    q = quantize_fp8(x, state)
    with np.errstate(all="ignore"):
        scaled = (x * np.float32(init)).astype(np.float64)  # float32 product, as the cast computes it
    check_cast(scaled, q.numpy(), name, "nearest", True)
    assert q.scale == np.float32(init)


# -------------------------------------------------------------------- damaged files


def _corrupt(raw: bytes, data) -> bytes:
    """Truncate, or overwrite a few bytes at random places, as a flaky disk or a cut download would."""
    if data.draw(st.booleans(), label="truncate"):
        return raw[:data.draw(st.integers(0, len(raw) - 1), label="cut at")]
    b = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 4), label="hits")):
        i = data.draw(st.integers(0, len(b) - 1), label="at")
        b[i] = data.draw(st.integers(0, 255).filter(lambda v, i=i: v != b[i]), label="byte")
    return bytes(b)


def _tensor_files(tmp):
    arrays = {"w": np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4), "g": np.float16([1e-7, 0.5, -2])}
    np.savez(tmp / "t.npz", **arrays)
    np.save(tmp / "t.npy", arrays["w"])
    from safetensors.numpy import save_file

    save_file(arrays, str(tmp / "t.safetensors"))
    files = ["t.npz", "t.npy", "t.safetensors"]
    try:
        import torch

        torch.save({k: torch.from_numpy(v) for k, v in arrays.items()}, tmp / "t.pt")
        files.append("t.pt")
    except ImportError:
        pass
    return arrays, files


@pytest.fixture(scope="module")
def tensor_files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("files")
    arrays, files = _tensor_files(tmp)
    return _Saved((tmp, arrays, {f: (tmp / f).read_bytes() for f in files}))


@settings(max_examples=200, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_tensor_files_read_right_or_fail_naming_the_file(tensor_files, data):
    tmp, arrays, originals = tensor_files
    name = data.draw(st.sampled_from(sorted(originals)), label="file")
    path = tmp / f"bad_{name}"
    path.write_bytes(_corrupt(originals[name], data))
    try:
        got = list(read_tensors(path))
    except ALLOWED as e:
        assert str(path) in str(e) and "\n" not in str(e).strip(), str(e)
        return
    # read without complaint: then every array is one of the file's, or holds what a damaged
    # header or payload byte turned it into - same shapes and dtypes at least, never garbage types
    want = {os.path.splitext(name)[0]: arrays["w"]} if name.endswith(".npy") else arrays
    size = path.stat().st_size
    for key, arr in got:
        assert isinstance(arr, np.ndarray), key
        assert arr.nbytes <= size, (key, arr.shape)  # nothing out of nowhere
        if name.endswith(".npz"):  # every member is CRC-checked: read whole means read right
            assert key in want and arr.dtype == want[key].dtype and np.array_equal(arr, want[key], equal_nan=True)


def _ckpt_objects(seed):
    from fpsim import GradScaler
    from fpsim.optim import Adam

    model = nn.MLP([3, 4, 2], fmt="float16", seed=seed)
    opt = Adam(model.parameters(), lr=1e-2, master_weights=True)
    return model, opt, GradScaler(init_scale=2.0 ** (8 + seed))


def _state(model, opt, scaler):
    out = {f"m/{k}": v.tobytes() for k, v in model.state_dict().items()}
    out.update({f"o/{k}": v.tobytes() if isinstance(v, np.ndarray) else v for k, v in opt.state_dict().items()})
    out.update({f"s/{k}": v for k, v in scaler.state_dict().items()})
    return out


@pytest.fixture(scope="module")
def saved_checkpoint(tmp_path_factory):
    from fpsim import tensor

    tmp = tmp_path_factory.mktemp("ckpt")
    model, opt, scaler = _ckpt_objects(0)
    x = tensor(np.random.default_rng(0).standard_normal((5, 3)), "float16")
    nn.mse_loss(model(x).float(), tensor(np.zeros((5, 2)))).backward()
    opt.step()
    path = checkpoint.save(tmp / "ck.npz", model, opt, scaler=scaler)
    return _Saved((tmp, path.read_bytes(), _state(model, opt, scaler)))


class _Saved(tuple):
    def __repr__(self):  # Hypothesis prints its arguments: not the files' bytes
        return "<saved files>"


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_checkpoint_loads_whole_or_changes_nothing(saved_checkpoint, data):
    tmp, raw, saved = saved_checkpoint
    path = tmp / "bad.npz"
    path.write_bytes(_corrupt(raw, data))
    model, opt, scaler = _ckpt_objects(1)
    before = _state(model, opt, scaler)
    try:
        checkpoint.load(path, model, opt, scaler=scaler)
    except ALLOWED as e:
        assert str(path) in str(e) or "left unchanged" in str(e), str(e)
        assert _state(model, opt, scaler) == before
        return
    assert _state(model, opt, scaler) == saved  # loaded: then exactly what was saved


# -------------------------------------------------------------------- the command line


def _options(parser):
    """Every option string of a (sub)parser, with how many values it takes."""
    out = []
    for a in parser._actions:
        if a.option_strings and "-h" not in a.option_strings:
            out.append((a.option_strings[-1], a.nargs, a.choices))
    return out


VALUES = ["1", "0", "-1", "-1e-8", "1e-8", "3", "nan", "inf", "-inf", "1e400", "fp16", "e4m3", "fp17", "bf16,fp16",
          "fp32", "x", "", "2", "1024", "numpy", "cupy", "none", "--", "-", "0x10", "1_000", " 5", "5e-324", "1e300",
          "3.4e38", "-1e-45", "65504"]


def run_main(argv, cwd):
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            if argv and argv[0] in ("formats", "example"):
                warnings.simplefilter("error", RuntimeWarning)  # no numpy warning may leak into their output
            try:
                rc = cli.main(argv)
            except SystemExit as e:  # argparse: usage errors (2) and --help (0)
                rc = e.code
    finally:
        os.chdir(old)
    return rc, out.getvalue(), err.getvalue()


def _argv(data, command, parser, extra_values=()):
    opts = _options(parser) + [("--bogus", None, None)]
    argv = [command]
    for _ in range(data.draw(st.integers(0, 4), label="n options")):
        opt, nargs, choices = data.draw(st.sampled_from(opts), label="option")
        argv.append(opt)
        if nargs == 0:
            continue
        pool = list(choices or []) + VALUES + list(extra_values)
        n = 1 if nargs is None else data.draw(st.integers(1 if nargs == "+" else 0, 3), label="n values")
        argv += [str(data.draw(st.sampled_from(pool), label="value")) for _ in range(n)]
    return argv


def _check_run(rc, out, err, cwd):
    assert rc in (0, 2), (rc, err)
    assert "Traceback" not in err and "Traceback" not in out
    if rc == 2:
        lines = [ln for ln in err.strip().splitlines() if ln]
        assert lines and (lines[-1].startswith("fpsim") or lines[0].startswith("usage:")), err
    leftovers = [p for p in os.listdir(cwd) if p.endswith(".tmp")]
    assert not leftovers, leftovers


SUBPARSERS = {name: p for name, p in cli.build_parser(None)._subparsers._group_actions[0].choices.items()}


@settings(FUZZ, max_examples=150)
@given(data=st.data())
def test_cli_formats_and_example_never_crash(tmp_path, data):
    command = data.draw(st.sampled_from(["formats", "example"]), label="command")
    argv = _argv(data, command, SUBPARSERS[command])
    rc, out, err = run_main(argv, tmp_path)
    _check_run(rc, out, err, tmp_path)


@pytest.fixture(scope="module")
def audit_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("audit")
    np.savez(tmp / "g.npz", g=np.float32([1e-8, 1e-3, 1.0, 3e5]), i=np.arange(3))
    np.savez(tmp / "nan.npz", g=np.float32([np.nan, np.inf]))
    (tmp / "junk.npz").write_bytes(b"PK\x03\x04 nonsense")
    (tmp / "dir.npz").mkdir()
    return tmp


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_cli_audit_never_crashes_and_json_is_strict(audit_dir, data):
    files = ["g.npz", "nan.npz", "junk.npz", "dir.npz", "missing.npz", "g.txt"]
    argv = _argv(data, "audit", SUBPARSERS["audit"], extra_values=["g.png", "sub/x.png", "x.svg", "x.unknown"])
    argv.insert(1, data.draw(st.sampled_from(files), label="file"))
    if "--out" not in argv:
        argv.append("--no-figure")  # drawing is slow: only where --out asks for it
    rc, out, err = run_main(argv, audit_dir)
    _check_run(rc, out, err, audit_dir)
    if "--json" in argv and out.strip():
        json.loads(out, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))


@pytest.mark.slow
@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_cli_compare_never_crashes(tmp_path, data):
    argv = _argv(data, "compare", SUBPARSERS["compare"], extra_values=["fp16-pure", "bf16-pure"])
    # keep each run short: at most 2 steps, at most 2 recipes, no figure
    argv = [a for a in argv if a not in ("--steps", "--seeds", "--recipes", "--figure")]
    argv += ["--steps", data.draw(st.sampled_from(["1", "2", "0", "-1", "x"])), "--figure", "none", "--quiet",
             "--recipes", *data.draw(st.lists(st.sampled_from(["fp32", "fp16-pure", "nope"]), min_size=1,
                                              max_size=2, unique=True))]
    rc, out, err = run_main(argv, tmp_path)
    _check_run(rc, out, err, tmp_path)
    if rc == 0 and "--json" in argv:
        json.loads(out, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))


# -------------------------------------------------------------------- every JSON a command writes


def _strict(text):
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))


def test_every_command_that_writes_json_writes_strict_json(tmp_path, audit_dir):
    rc, out, err = run_main(["audit", "g.npz", "--json", "--no-figure"], audit_dir)
    assert rc == 0, err
    assert _strict(out)["overall"]["n"] == 4
    rc, out, err = run_main(["audit", "nan.npz", "--json"], audit_dir)
    assert rc == 2 and _strict(out)["nothing_to_judge"]
    with np.errstate(all="ignore"):
        rc, out, err = run_main(["compare", "--recipes", "fp32", "fp16-pure", "--steps", "2", "--seeds", "0", "1",
                                 "--figure", "none", "--json", "--quiet"], tmp_path)
    assert rc == 0, err
    d = _strict(out)
    assert d["0"]["fp16-pure"]["final_loss"] is None and d["1"]["fp16-pure"]["null_values"]["final_loss"] == "nan"
    rc, out, err = run_main(["bench", "--quick", "--sections", "rounding", "--repeats", "1", "--json", "--quiet"],
                            tmp_path)
    assert rc == 0, err
    assert _strict(out)["rows"] if "rows" in _strict(out) else _strict(out)
    rc, out, err = run_main(["reproduce", "nvfp4-four-over-six", "--quick", "--json", "--figure", "none"], tmp_path)
    assert rc == 0, err
    assert _strict(out)["verdict"] in ("reproduced", "partly", "not at this scale")
    rc, out, err = run_main(["bits", "--items", "arithmetic", "--json"], tmp_path)
    assert rc == 0, err
    assert set(_strict(out)["fingerprints"]) == {"arithmetic"}
    # the commands with a --json option: audit, compare, bench, reproduce, bits (above), gpu-check (below)
    assert {n for n, p in SUBPARSERS.items() if any(a.dest == "json" for a in p._actions)} == \
        {"audit", "compare", "bench", "reproduce", "gpu-check", "bits"}


def test_gpu_check_json_file_is_strict(tmp_path):
    """gpu-check --json PATH: without a GPU it says so; the JSON it writes (if any) is strict and whole."""
    path = tmp_path / "gpu.json"
    rc, out, err = run_main(["gpu-check", "--quick", "--no-task", "--json", str(path)], tmp_path)
    assert rc in (0, 2) and "Traceback" not in err
    if path.exists():
        _strict(path.read_text())
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_the_fuzz_reference_itself_is_right():
    """gfloat and the helpers agree with hand-computed roundings (so the fuzz cannot pass by agreeing with nothing)."""
    x = np.array([1000.0, 0.3, 2.0**-10, 1.5 * 2.0**-10, -65520.0, np.inf])
    (e4,) = ref_cast(x, "float8_e4m3fn", "nearest", False)  # 2^-10: a tie between 0 and 2^-9, to even
    assert [float(v) if math.isfinite(v) else str(v) for v in e4.astype(np.float64)] == \
        ["nan", 0.3125, 0.0, 2.0**-9, "nan", "nan"]
    (h,) = ref_cast(x, "float16", "nearest", False)
    assert h.astype(np.float64).tolist()[:5] == [1000.0, 0.300048828125, 2.0**-10, 1.5 * 2.0**-10, -np.inf]
    up, down = ref_cast(np.array([0.3]), "float16", "stochastic", False)
    assert (float(up[0]), float(down[0])) == (0.300048828125, 0.2998046875)  # 1229 and 1228 x 2^-12


def _edit(entries: dict, data) -> dict:
    """A readable checkpoint with wrong contents: entries dropped, renamed, reshaped, retyped or
    given junk values - what a hand-edited file or one from another program looks like."""
    out = dict(entries)
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        key = data.draw(st.sampled_from(sorted(out)), label="key")
        how = data.draw(st.sampled_from(["drop", "rename", "reshape", "retype", "junk", "format"]), label="how")
        v = out[key]
        if how == "drop":
            del out[key]
        elif how == "rename":
            out[key.replace("/", "/x", 1) if "/" in key else "x" + key] = out.pop(key)
        elif how == "reshape":
            out[key] = np.resize(v, (v.size + 1,)) if v.ndim else np.zeros(2, v.dtype)
        elif how == "retype":
            out[key] = v.astype(data.draw(st.sampled_from([np.float64, np.float32, np.int8, np.bool_]))) \
                if v.dtype.kind in "fiub" else np.asarray(1.5)
        elif how == "junk":
            out[key] = np.asarray(data.draw(st.sampled_from([-1, 0, 2**40, np.nan, np.inf, "abc", "Adam", "SGD"])))
        else:
            names = sorted(ALL_FORMATS) + ["fp4", "e8m0", "float64", "nope"]  # 4- / 6-bit and scale formats too
            out[key.split("#")[0] + "#fmt"] = np.asarray(data.draw(st.sampled_from(names)))
    return out


def _file_model_bits(path) -> dict:
    with np.load(path, allow_pickle=False) as z:
        return {k[len("model/"):]: z[k].view(get_format(str(z[k + "#fmt"])).dtype).tobytes()
                for k in z.files if k.startswith("model/") and "#" not in k}


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_edited_checkpoint_loads_whole_or_changes_nothing(saved_checkpoint, data):
    tmp, raw, saved = saved_checkpoint
    with np.load(io.BytesIO(raw), allow_pickle=False) as z:
        entries = {k: z[k] for k in z.files}
    path = tmp / "edited.npz"
    np.savez(path, **_edit(entries, data))
    model, opt, scaler = _ckpt_objects(1)
    before = _state(model, opt, scaler)
    try:
        checkpoint.load(path, model, opt, scaler=scaler)
    except ALLOWED as e:
        msg = str(e)
        assert "\n" not in msg and (str(path) in msg or "left unchanged" in msg), msg
        assert _state(model, opt, scaler) == before
        return
    got = {k[len("m/"):]: v for k, v in _state(model, opt, scaler).items() if k.startswith("m/")}
    assert got == _file_model_bits(path)  # loaded: the model holds exactly what the file says
