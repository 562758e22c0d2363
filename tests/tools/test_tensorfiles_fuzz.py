"""Property test of reading tensor files (``fpsim.tools.audit.tensorfiles.read_tensors``): .npz,
.npy, .safetensors and .pt files with bytes overwritten or cut read right, or fail with ONE
one-line ``ValueError`` / ``TypeError`` / ``OSError`` naming the file."""

from __future__ import annotations

import os

import numpy as np
import pytest
from support.fuzzing import Saved, corrupt

from fpsim.tools.audit.tensorfiles import read_tensors

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

ALLOWED = (ValueError, TypeError, OSError)


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
    return Saved((tmp, arrays, {f: (tmp / f).read_bytes() for f in files}))


@settings(max_examples=200, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_tensor_files_read_right_or_fail_naming_the_file(tensor_files, data):
    tmp, arrays, originals = tensor_files
    name = data.draw(st.sampled_from(sorted(originals)), label="file")
    path = tmp / f"bad_{name}"
    path.write_bytes(corrupt(originals[name], data))
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
