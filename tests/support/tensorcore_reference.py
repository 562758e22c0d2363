"""MMA-Sim (Microsoft's bit-accurate tensor-core model, ``pip install mmasim``) as a reference for
fpsim.tensorcore: its instructions built from its own ISA tables (its parameters, not fpsim's), fed
numpy arrays through torch, the whole K at once (its ``dpa`` chains the steps itself)."""

import ml_dtypes
import numpy as np
import pytest
from helpers import bits  # noqa: F401 - the tensor-core tests take it from here with the references

from fpsim import tensorcore as tc

torch = pytest.importorskip("torch")
nv = pytest.importorskip("mmasim.nv_ptx")

_TORCH = {np.dtype(np.float16): (np.uint16, torch.float16), np.dtype(ml_dtypes.bfloat16): (np.uint16, torch.bfloat16),
          np.dtype(np.float32): (np.uint32, torch.float32),
          np.dtype(ml_dtypes.float8_e4m3fn): (np.uint8, torch.float8_e4m3fn),
          np.dtype(ml_dtypes.float8_e5m2): (np.uint8, torch.float8_e5m2)}
_PTX = {"float16": "f16", "bfloat16": "bf16", "tf32": "tf32", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}
_NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "tf32": np.float32,
       "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}


def _to_torch(x: np.ndarray):
    uint, tdt = _TORCH[x.dtype]
    t = torch.from_numpy(np.ascontiguousarray(x).view(uint).astype(np.int64))
    return t.to({np.uint8: torch.uint8, np.uint16: torch.int16, np.uint32: torch.int32}[uint]).view(tdt)


def _reference(arch: str, fa: str, fb: str, out: str):
    """The MMA-Sim instruction for (arch, input formats, accumulator)."""
    d = "f16" if out == "float16" else "f32"
    a, b = _PTX[fa], _PTX[fb]
    k = {"tf32": 8, "float16": 16, "bfloat16": 16}.get(fa, 32)
    if arch == "hopper":
        return nv.WGMMA("Hopper", f"m64n8k{k}.{d}.{a}.{b}")
    if arch == "blackwell":
        kind = {"tf32": "tf32", "float16": "f16", "bfloat16": "f16"}.get(fa, "f8f6f4")
        return nv.TCGen05MMA("Blackwell", f"m64n8k{k}.kind::{kind}.{d}.{a}.{b}")
    if arch == "volta":
        return nv.MMA("Volta", f"m8n8k4.{d}.{a}.{b}.{d}")
    if arch == "turing":
        return nv.MMA("Turing", f"m16n8k8.{d}.{a}.{b}.{d}")
    name = {"ampere": "Ampere", "ada": "Ada Lovelace"}[arch]
    return nv.MMA(name, f"m16n8k{k}.{d}.{a}.{b}.{d}")


def mmasim(arch, a, b, c, fa, fb):
    """MMA-Sim's D = A B + C over the whole K, K zero-padded to whole steps as fpsim pads it."""
    out = "float16" if c.dtype == np.float16 else "float32"
    L = tc.instruction(arch, fa, fb, out).slice_length
    pad = -a.shape[1] % L
    a = np.pad(a, [(0, 0), (0, pad)])
    b = np.pad(b, [(0, pad), (0, 0)])
    d = _reference(arch, fa, fb, out)(_to_torch(a), _to_torch(b), torch.from_numpy(c.copy()))
    return d.numpy()
