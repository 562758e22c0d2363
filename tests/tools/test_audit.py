"""fpsim.tools.audit and ``fpsim audit``: exact percentages and loss-scale ranges, file handling.

Scale ranges are checked against hand arithmetic and against a brute-force reference that
casts values * 2^k with numpy / ml_dtypes for every k (independent of fpsim).
"""

import json
import struct
import subprocess
import sys
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from fpsim.formats.survival import survival
from fpsim.tools import cli
from fpsim.tools.audit import audit, audit_arrays, read_tensors

DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
          "float8_e5m2": ml_dtypes.float8_e5m2}


def brute_force_range(values32, dtype, lo=-30, hi=40, keep_num=999, keep_den=1000):
    """The safe exponents by casting values * 2^k (exact in float32 here) for every k."""
    v = np.asarray(values32, np.float32)
    v = v[np.isfinite(v) & (v != 0)]
    good = []
    for k in range(lo, hi + 1):
        s = (v * np.float32(2.0**k)).astype(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            r = s.astype(dtype).astype(np.float64)
        flushed = int(np.sum(r == 0))
        over = int(np.sum(~np.isfinite(r)))
        if (v.size - flushed) * keep_den >= keep_num * v.size and over == 0:
            good.append(k)
    if good:
        assert good == list(range(good[0], good[-1] + 1))  # one interval
        return (good[0], good[-1])
    return None


def exact_dump(tmp_path):
    v = np.concatenate([np.ones(750, np.float32), np.full(250, 1e-9, np.float32)])
    path = tmp_path / "grads.npz"
    np.savez(path, layer0=v, step=np.array(3))
    return path, v


def test_audit_exact_percentages_and_scale_ranges(tmp_path):
    path, v = exact_dump(tmp_path)
    rep = audit(path)
    assert [t.name for t in rep.tensors] == ["layer0"]
    assert rep.skipped == [("step", "dtype int64 is not floating point")]
    f = rep.overall.formats
    # 1e-9 <= 2^-25: flushed in float16 -> 250 of 1000
    assert (f["float16"].flushed, f["float16"].nonzero, f["float16"].pct_flushed) == (250, 1000, 25.0)
    assert f["float16"].pct_subnormal == 0.0 and f["float16"].pct_overflow == 0.0
    assert f["bfloat16"].pct_flushed == 0.0
    # float16: 1e-9 * 2^k survives from k = 5 (3.2e-8 > 2^-25); 1.0 * 2^16 = 65536 overflows
    assert f["float16"].scale_range == (5, 15)
    assert f["bfloat16"].scale_range == (-30, 40)  # nothing flushes or overflows in the search range
    # e4m3fn: keeping 1e-9 needs k >= 20 (1e-9 * 2^k > 2^-10), but 2^k > 464 overflows from k = 9
    assert f["float8_e4m3fn"].scale_range is None
    # e5m2: kept from k = 13 (> 2^-17), overflow from 2^16 (>= 61440)
    assert f["float8_e5m2"].scale_range == (13, 15)
    for name, dt in DTYPES.items():
        assert f[name].scale_range == brute_force_range(v, dt), name
    assert rep.tensors[0].formats["float16"].scale_range == (5, 15)
    text = rep.table()
    assert "25.00%" in text and "2^5 .. 2^15" in text and "skipped step" in text


@pytest.mark.parametrize("keep", [0.999, 0.9, 1.0])
def test_scale_ranges_match_brute_force_on_wide_data(keep):
    rng = np.random.default_rng(11)
    v = (np.exp2(rng.normal(-22, 7, 4000)) * rng.choice([-1, 1], 4000)).astype(np.float32)
    v[:50] = 0
    rep = audit_arrays({"g": v}, keep=keep)
    num, den = {0.999: (999, 1000), 0.9: (9, 10), 1.0: (1, 1)}[keep]
    for name, dt in DTYPES.items():
        got = rep.overall.formats[name]
        assert got.scale_range == brute_force_range(v, dt, keep_num=num, keep_den=den), (name, keep)
        s = survival(v, name)
        assert (got.flushed, got.subnormal, got.overflow, got.nonzero) == (
            s["flushed"], s["subnormal"], s["overflow"], 3950)
        with np.errstate(over="ignore"):
            r = v.astype(dt).astype(np.float64)
        assert got.flushed == int(np.sum((r == 0) & (v != 0)))


def test_overall_combines_tensors():
    a = np.full(100, 1e-9, np.float32)  # flushed in float16 at scale 1
    b = np.full(300, 1.0, np.float32)
    rep = audit_arrays([("a", a), ("b", b)], formats=["fp16"])
    o = rep.overall.formats["float16"]
    assert (o.nonzero, o.flushed, o.pct_flushed) == (400, 100, 25.0)
    assert rep.tensors[0].formats["float16"].scale_range == (5, 40)  # alone, 1e-9 never overflows
    assert rep.tensors[1].formats["float16"].scale_range == (-24, 15)  # 1.0 x 2^-25 is a tie, flushed
    assert o.scale_range == (5, 15)
    d = rep.to_dict()
    assert d["overall"]["formats"]["float16"]["scale_exponents"] == [5, 15]
    assert json.loads(json.dumps(d)) == d


def test_read_tensors_is_lazy_one_array_at_a_time(tmp_path):
    path = tmp_path / "mixed.npz"
    np.savez(path, good=np.arange(3.0), bad=np.array([{}], dtype=object))
    it = read_tensors(path)
    name, arr = next(it)
    assert name == "good" and arr.tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(ValueError, match=r"mixed\.npz: array 'bad' holds pickled"):
        next(it)


def write_safetensors(path, tensors: dict, dtypes: dict):
    """A .safetensors file written from the published layout: u64 header size, JSON, bytes."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, arr in tensors.items():
        raw = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dtypes[name], "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def test_safetensors_read_exactly(tmp_path):
    bf = np.array([1.0, 2.0**-130, 3.0e38], dtype=ml_dtypes.bfloat16)
    f16 = np.array([[1e-8, 2.0**-24], [65504.0, -0.0]], dtype=np.float16)
    path = tmp_path / "g.safetensors"
    write_safetensors(path, {"b": bf, "h": f16, "i": np.arange(4, dtype=np.int64)},
                      {"b": "BF16", "h": "F16", "i": "I64"})
    got = dict(read_tensors(path))
    assert got["b"].dtype == ml_dtypes.bfloat16 and got["b"].view(np.uint16).tolist() == bf.view(np.uint16).tolist()
    assert got["h"].shape == (2, 2) and got["h"].view(np.uint16).tolist() == f16.view(np.uint16).tolist()
    rep = audit(path, formats=["float16"])
    assert [t.name for t in rep.tensors] == ["b", "h"] and rep.skipped[0][0] == "i"
    # b in float16: 2^-130 flushes, 3e38 overflows
    assert (rep.tensors[0].formats["float16"].flushed, rep.tensors[0].formats["float16"].overflow) == (1, 1)

    bad = tmp_path / "bad.safetensors"
    write_safetensors(bad, {"h": f16}, {"h": "F32"})  # 8 bytes declared as 4 float32 = 16 bytes
    with pytest.raises(ValueError, match=r"bad\.safetensors: tensor 'h'"):
        list(read_tensors(bad))


def test_safetensors_package_agrees(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    arr = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    path = tmp_path / "p.safetensors"
    st.save_file({"w": arr, "v": arr[0].astype(np.float16)}, str(path))
    got = dict(read_tensors(path))
    assert np.array_equal(got["w"], arr) and np.array_equal(got["v"], arr[0].astype(np.float16))


def test_npy_single_array(tmp_path):
    path = tmp_path / "g.npy"
    np.save(path, np.full(8, 1e-9, np.float32))
    rep = audit(path, formats=["float16"])
    assert rep.tensors[0].name == "g" and rep.overall.formats["float16"].pct_flushed == 100.0


def test_torch_file(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "grads.pt"
    g = torch.cat([torch.ones(750), torch.full((250,), 1e-9)])
    torch.save({"layer": {"weight": g, "bias": torch.tensor([2.0**-20], dtype=torch.bfloat16)}, "step": 7}, path)
    rep = audit(path)
    names = [t.name for t in rep.tensors]
    assert names == ["layer.weight", "layer.bias"] and rep.skipped == [("step", "not a tensor")]
    w = rep.tensors[0].formats
    assert w["float16"].pct_flushed == 25.0 and w["float16"].scale_range == (5, 15)
    b = rep.tensors[1]
    assert b.dtype == "float32" and b.formats["float16"].subnormal == 1  # 2^-20 read exactly from bfloat16
    (tmp_path / "broken.pt").write_bytes(path.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"broken\.pt: not a readable PyTorch"):
        list(read_tensors(tmp_path / "broken.pt"))


# ---------------------------------------------------------------------------------------- CLI


def run_cli(capsys, *argv):
    rc = cli.main(["audit", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_json_and_default_figure_next_to_the_file(tmp_path, capsys):
    path, _ = exact_dump(tmp_path)
    rc, out, err = run_cli(capsys, path, "--json", "--formats", "fp16,bf16")
    assert rc == 0, err
    d = json.loads(out)
    assert d["formats"] == ["float16", "bfloat16"]
    assert d["overall"]["formats"]["float16"]["pct_flushed"] == 25.0
    assert d["overall"]["formats"]["float16"]["scale_exponents"] == [5, 15]
    assert d["figure"] == str(tmp_path / "grads_audit.png") and (tmp_path / "grads_audit.png").stat().st_size > 0


def test_cli_table_without_figure(tmp_path, capsys):
    path, _ = exact_dump(tmp_path)
    rc, out, _ = run_cli(capsys, path, "--no-figure", "--formats", "e5m2")
    assert rc == 0 and "2^13 .. 2^15" in out and "\nfigure:" not in out
    assert not (tmp_path / "grads_audit.png").exists()


def _one_line_error(rc, out, err, name):
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert name in lines[0] and "Traceback" not in err
    return lines[0]


def test_cli_bad_files_exit_2_with_one_line(tmp_path, capsys):
    line = _one_line_error(*run_cli(capsys, tmp_path / "missing.npz"), "missing.npz")
    assert "no such file" in line
    (tmp_path / "corrupt.npz").write_bytes(b"this is not a zip file at all" * 10)
    line = _one_line_error(*run_cli(capsys, tmp_path / "corrupt.npz"), "corrupt.npz")
    assert "not an .npz file" in line
    good, _ = exact_dump(tmp_path)
    (tmp_path / "truncated.npz").write_bytes(good.read_bytes()[:200])
    _one_line_error(*run_cli(capsys, tmp_path / "truncated.npz"), "truncated.npz")
    np.savez(tmp_path / "objects.npz", a=np.array([{"x": 1}], dtype=object))
    line = _one_line_error(*run_cli(capsys, tmp_path / "objects.npz", "--no-figure"), "objects.npz")
    assert "pickled" in line
    (tmp_path / "empty.npz").write_bytes(b"")
    _one_line_error(*run_cli(capsys, tmp_path / "empty.npz"), "empty.npz")
    (tmp_path / "g.txt").write_text("1 2 3")
    line = _one_line_error(*run_cli(capsys, tmp_path / "g.txt"), "g.txt")
    assert ".safetensors" in line
    _one_line_error(*run_cli(capsys, good, "--formats", "fp17"), "fp17")


def test_cli_subprocess_exit_status(tmp_path):
    r = subprocess.run([sys.executable, "-m", "fpsim.tools.cli", "audit", str(tmp_path / "nope.npz")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "nope.npz" in r.stderr


def test_raw_bytes_and_pickled_npy_are_reported(tmp_path):
    np.savez(tmp_path / "bf.npz", w=np.ones(3, ml_dtypes.bfloat16), g=np.full(4, 1e-9, np.float32))
    rep = audit(tmp_path / "bf.npz", formats=["float16"])
    assert [t.name for t in rep.tensors] == ["g"]
    assert rep.skipped[0][0] == "w" and "save as float32" in rep.skipped[0][1]
    np.save(tmp_path / "o.npy", np.array([{}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match=r"o\.npy: holds pickled"):
        list(read_tensors(tmp_path / "o.npy"))


def _quarter(a: float) -> int:
    """floor(4 log2 a) in exact rationals: the largest q with 2^q <= a^4."""
    f = Fraction(a) ** 4
    q = f.numerator.bit_length() - f.denominator.bit_length()
    while Fraction(2) ** q > f:
        q -= 1
    while Fraction(2) ** (q + 1) <= f:
        q += 1
    return q


def test_histogram_bins_are_exact_at_the_quarter_binade_edges():
    """The audit's histogram bins log2|x| by quarter binades exactly (numpy's log2 differs by CPU in
    the last bit): the float64 numbers on either side of every 2^(e + j/4) land on either side."""
    edge = []
    for e in (-40, -1, 0, 9):
        for j in (1, 2, 3):
            f = 2.0 ** (e + j / 4)
            while _quarter(f) >= 4 * e + j:
                f = np.nextafter(f, 0.0)
            while _quarter(f) < 4 * e + j:
                f = np.nextafter(f, np.inf)
            edge += [f, np.nextafter(f, 0.0)]  # the first float64 in the quarter, the last before it
    rng = np.random.default_rng(0)
    vals = np.concatenate([edge, np.abs(rng.standard_normal(300)) * np.exp2(rng.integers(-60, 60, 300)),
                           [2.0**-1074, 1e300]])
    want = np.zeros(1200, np.int64)
    for v in vals:
        want[min(max(_quarter(float(v)) + 640, 0), 1199)] += 1
    assert np.array_equal(audit_arrays({"v": vals}).counts, want)


# ---- hostile headers and views: refused in one line, before anything large is allocated -------------


def test_safetensors_header_nesting_100k_levels_is_refused(tmp_path, capsys):
    """A header that nests 100,000 levels is no safetensors header (the format nests three): one line,
    not Python's RecursionError."""
    path = tmp_path / "deep.safetensors"
    h = ('{"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": ' + "[" * 100_000 + "]" * 100_000
         + "}}").encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"\0" * 4)
    with pytest.raises(ValueError, match=r"deep\.safetensors: not a \.safetensors file \(its header nests deeper"):
        list(read_tensors(path))
    line = _one_line_error(*run_cli(capsys, path, "--no-figure"), "deep.safetensors")
    assert "nests deeper" in line


def test_safetensors_tensor_of_100_dimensions_names_file_and_tensor(tmp_path, capsys):
    path = tmp_path / "wide.safetensors"
    h = json.dumps({"g": {"dtype": "F32", "shape": [1] * 100, "data_offsets": [0, 4]}}).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + np.float32(1.5).tobytes())
    with pytest.raises(ValueError, match=r"wide\.safetensors: tensor 'g' \(F32, 100 dimensions\) cannot be held "
                                         r"as a numpy array"):
        list(read_tensors(path))
    line = _one_line_error(*run_cli(capsys, path, "--no-figure"), "wide.safetensors")
    assert "'g'" in line


def test_pt_of_3e9_stride_0_elements_is_refused_before_allocating(tmp_path, capsys):
    """``torch.zeros(1).expand(3e9)`` saves 4 bytes of storage; its dense array would be 12 GB
    (24 GB widened): refused, naming the tensor and both sizes, before any array is made."""
    torch = pytest.importorskip("torch")
    path = tmp_path / "view.pt"
    torch.save({"g": torch.zeros(1).expand(3_000_000_000), "ok": torch.ones(3).expand(2, 3)}, path)
    assert path.stat().st_size < 10_000
    names = []
    with pytest.raises(ValueError, match=r"view\.pt: tensor 'g' \(torch.float32, shape \(3000000000,\)\) is a view of "
                                         r"4 stored bytes .*12,000,000,000 bytes"):
        for name, arr in read_tensors(path):
            names.append((name, arr.shape))
    assert names == []  # g comes first and is refused; nothing was materialised
    torch.save({"ok": torch.ones(3).expand(2, 3)}, path)  # a small expanded tensor is read as its values
    (name, arr), = read_tensors(path)
    assert name == "ok" and arr.shape == (2, 3) and np.array_equal(arr, np.ones((2, 3), np.float32))
    torch.save({"g": torch.zeros(1).expand(3_000_000_000)}, path)
    line = _one_line_error(*run_cli(capsys, path, "--no-figure"), "view.pt")
    assert "'g'" in line and "stored bytes" in line
