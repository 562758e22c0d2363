"""Reading tensor files one tensor at a time: ``.npz``, ``.npy``, ``.safetensors``, PyTorch ``.pt``.

Files are read with ``allow_pickle=False`` (PyTorch: ``weights_only=True``); ``.safetensors``
is parsed directly from its published layout (8-byte header length, JSON header, raw
little-endian data), so no extra package is needed and bfloat16/fp8 tensors keep their type.
"""

from __future__ import annotations

import json
import math
import os
import warnings

import ml_dtypes
import numpy as np

__all__ = ["read_tensors", "SUFFIXES"]

SUFFIXES = (".npz", ".npy", ".safetensors", ".pt", ".pth")

_ST_DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16), "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"), "U32": np.dtype("<u4"), "U16": np.dtype("<u2"), "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def read_tensors(path):
    """Yield ``(name, numpy array)`` from a tensor file, reading one tensor at a time.

    ``.npz`` / ``.npy`` (``allow_pickle=False``), ``.safetensors`` (parsed directly),
    ``.pt`` / ``.pth`` (needs torch; ``torch.load(weights_only=True)``; nested dicts and lists
    are flattened to dotted names).  Errors are ``FileNotFoundError`` / ``ValueError`` with a
    one-line message naming the file (and the tensor, where one is at fault).
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path}: is a directory, not a tensor file")
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".npz":
        yield from _read_npz(path)
    elif suffix == ".npy":
        yield from _read_npy(path)
    elif suffix == ".safetensors":
        yield from _read_safetensors(path)
    elif suffix in (".pt", ".pth"):
        yield from _read_torch(path)
    else:
        raise ValueError(f"{path}: unknown file type {suffix or '(no suffix)'!r}; "
                         f"fpsim audit reads {', '.join(SUFFIXES)}")


def _sniff(path) -> bytes:
    """The first bytes of the file (its magic number); ValueError if it is empty."""
    with open(path, "rb") as fh:
        magic = fh.read(6)
    if not magic:
        raise ValueError(f"{path}: the file is empty")
    return magic


def _read_npz(path):
    magic = _sniff(path)
    if magic.startswith(b"\x93NUMPY"):
        raise ValueError(f"{path}: holds a single .npy array, not an .npz archive (rename it to .npy)")
    if not magic.startswith(b"PK"):
        raise ValueError(f"{path}: not an .npz file (it is not a zip archive)")
    # Our own handle, closed on every path (np.load leaks its own when the zip is damaged).
    with open(path, "rb") as fh:
        try:
            z = np.load(fh, allow_pickle=False)
        except Exception as e:  # BadZipFile, EOFError, NotImplementedError ("zip file version 6.4"), ...
            raise ValueError(f"{path}: not a readable .npz file ({_first_line(e)})") from None
        with z:
            for name in z.files:
                _check_npz_member(path, z, name)
                try:
                    arr = z[name]  # reads and decompresses this member only
                except ValueError as e:
                    if "allow_pickle" in str(e) or "Object arrays" in str(e):
                        raise ValueError(f"{path}: array {name!r} holds pickled Python objects, which fpsim does "
                                         "not load (allow_pickle=False)") from None
                    raise ValueError(f"{path}: array {name!r} is unreadable ({_first_line(e)})") from None
                except Exception as e:  # BadZipFile, zlib.error, EOFError from a damaged member
                    raise ValueError(f"{path}: array {name!r} is unreadable ({_first_line(e)})") from None
                yield name, arr


def _check_npz_member(path, z, name: str) -> None:
    """The member's .npy header read alone, and its declared shape and dtype held against the
    member's uncompressed size in the archive's directory: numpy allocates the declared array
    before reading it, so a header that declares more than the member holds is refused before
    any memory is taken (a hostile file costs its declared size at most when that size is true)."""
    member = name if name in z.zip.namelist() else f"{name}.npy"
    try:
        info = z.zip.getinfo(member)
        with z.zip.open(member) as fh:
            fmt = np.lib.format
            version = fmt.read_magic(fh)
            read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            shape, _, dtype = read(fh, max_header_size=10000)
            header = fh.tell()
    except Exception as e:  # a damaged member or header: named below, nothing allocated
        raise ValueError(f"{path}: array {name!r} has an unreadable .npy header ({_first_line(e)})") from None
    if dtype.hasobject:
        raise ValueError(f"{path}: array {name!r} holds pickled Python objects, which fpsim does not load "
                         "(allow_pickle=False)")
    declared = math.prod(shape) * dtype.itemsize  # Python ints: no overflow
    if header + declared != info.file_size:
        raise ValueError(f"{path}: array {name!r} declares shape {tuple(shape)} of {dtype} ({declared:,} bytes) but "
                         f"its member holds {max(info.file_size - header, 0):,} data bytes")


def _read_npy(path):
    magic = _sniff(path)
    if not magic.startswith(b"\x93NUMPY"):
        hint = " (it is a zip archive: rename it to .npz)" if magic.startswith(b"PK") else ""
        raise ValueError(f"{path}: not an .npy file{hint}")
    try:
        arr = np.load(path, allow_pickle=False, mmap_mode="r")
    except ValueError as e:
        if "pickle" in str(e) or "Python objects" in str(e):
            raise ValueError(f"{path}: holds pickled Python objects, which fpsim does not load "
                             "(allow_pickle=False)") from None
        raise ValueError(f"{path}: not a readable .npy file ({_first_line(e)})") from None
    except Exception as e:  # OSError, EOFError; a damaged header makes numpy's parser raise SyntaxError and more
        raise ValueError(f"{path}: not a readable .npy file ({_first_line(e)})") from None
    yield os.path.splitext(os.path.basename(path))[0], arr


def _read_safetensors(path):
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise ValueError(f"{path}: not a .safetensors file (shorter than its 8-byte header length)")
        n = int.from_bytes(head, "little")
        if n > min(size - 8, 100 * 2**20):
            raise ValueError(f"{path}: not a .safetensors file (header length {n} does not fit the file)")
        try:
            header = json.loads(fh.read(n).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: not a .safetensors file (header is not JSON: {_first_line(e)})") from None
        except RecursionError:  # the format nests three levels; a hostile header can nest 100,000
            raise ValueError(f"{path}: not a .safetensors file (its header nests deeper than Python's JSON "
                             "parser reads)") from None
        if not isinstance(header, dict):
            raise ValueError(f"{path}: not a .safetensors file (header is not a JSON object)")
        header.pop("__metadata__", None)
        base = 8 + n
        entries = []
        for name, info in header.items():
            try:
                dt_name, shape, (start, end) = info["dtype"], [int(s) for s in info["shape"]], info["data_offsets"]
                start, end = int(start), int(end)
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"{path}: tensor {name!r} has a malformed header entry {info!r}") from None
            if not isinstance(dt_name, str):
                raise ValueError(f"{path}: tensor {name!r} has a dtype that is not a name: {dt_name!r}")
            if not all(type(d) is int for d in info["shape"]):
                raise ValueError(f"{path}: tensor {name!r} has a shape that is not a list of whole numbers: "
                                 f"{info['shape']!r}")
            if any(d < 0 for d in shape):
                raise ValueError(f"{path}: tensor {name!r} has a negative dimension in its shape {shape}")
            entries.append((start, end, name, dt_name, shape))
        for start, end, name, dt_name, shape in sorted(entries):
            if dt_name not in _ST_DTYPES:
                raise ValueError(f"{path}: tensor {name!r} has dtype {dt_name!r}, which fpsim cannot read "
                                 f"(known: {', '.join(_ST_DTYPES)})")
            dt = _ST_DTYPES[dt_name]
            nbytes = math.prod(shape) * dt.itemsize  # Python ints: no overflow
            if end - start != nbytes or start < 0 or base + end > size:
                raise ValueError(f"{path}: tensor {name!r} ({dt_name}, shape {shape}) does not fit its byte range "
                                 f"{start}..{end} (file has {size - base} data bytes)")
            fh.seek(base + start)
            yield name, _shaped(path, name, dt_name, np.frombuffer(fh.read(nbytes), dtype=dt), shape)


def _shaped(path, name: str, dt_name: str, flat: np.ndarray, shape: list) -> np.ndarray:
    """``flat`` in ``shape``, or a ValueError naming the file and the tensor (numpy holds at most 64
    dimensions; a safetensors header may declare more)."""
    try:
        return flat.reshape(shape)
    except ValueError as e:
        raise ValueError(f"{path}: tensor {name!r} ({dt_name}, {len(shape)} dimensions) cannot be held as a numpy "
                         f"array ({_first_line(e)})") from None


def _read_torch(path):
    try:
        import torch
    except ImportError:
        raise ValueError(f"{path}: reading PyTorch files needs torch, which is not installed here "
                         "(or save the tensors with numpy.savez)") from None
    try:
        with warnings.catch_warnings():  # torch's deprecation notes about a file's contents
            warnings.simplefilter("ignore")
            obj = _torch_load(torch, path)
    except Exception as e:  # torch raises many types for a damaged or unsafe file
        raise ValueError(f"{path}: not a readable PyTorch tensor file ({_first_line(e)})") from None
    yield from _walk_torch(path, obj, torch)


def _torch_load(torch, path):
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError as e:
        if "mmap" not in str(e):
            raise
        return torch.load(path, map_location="cpu", weights_only=True)  # old, non-zip format


def _walk_torch(path, obj, torch):
    """``(dotted name, array)`` for every tensor in a loaded object (nested dicts and lists)."""

    def walk(prefix, o):
        if isinstance(o, torch.Tensor):
            yield prefix or "tensor", o
        elif isinstance(o, dict):
            for k, v in o.items():
                yield from walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(o, list | tuple):
            for i, v in enumerate(o):
                yield from walk(f"{prefix}.{i}" if prefix else str(i), v)
        else:
            yield prefix or "object", o

    for name, t in walk("", obj):
        if not isinstance(t, torch.Tensor):
            yield name, np.array(None, dtype=object)  # a plain number or string: listed as skipped
            continue
        yield name, _torch_array(path, name, t, torch)


# A view whose dense array is larger than the bytes it was saved with (expand()'s stride 0) is read
# as its values up to this size; above it the file does not hold what the array would cost.
_SMALL_VIEW = 2**26


def _dense_view(path, name: str, t):
    """``t`` if its elements are stored; a small broadcast view made dense; a large one refused, naming
    the tensor and both sizes, before anything is allocated (3e9 stride-0 elements are 4 bytes in the
    file and 12 GB as an array)."""
    stored = t.untyped_storage().nbytes()
    dense = t.numel() * t.element_size()
    if dense <= stored:
        return t
    if dense > _SMALL_VIEW:
        raise ValueError(f"{path}: tensor {name!r} ({t.dtype}, shape {tuple(t.shape)}) is a view of {stored:,} stored "
                         f"bytes (stride-0 or overlapping strides, as expand() makes): its array would take {dense:,} "
                         "bytes the file does not hold; save it with .clone() (or the tensor it expands) first")
    return t.contiguous()


def _torch_array(path, name: str, t, torch) -> np.ndarray:
    """A dense tensor as a numpy array (bfloat16 / fp8 widened exactly to float32); sparse,
    quantized, nested and other tensors that are not plain dense arrays are a ValueError naming
    the file, the tensor and what it is."""
    kind = ("sparse" if t.layout != torch.strided else "quantized" if t.is_quantized
            else "nested" if getattr(t, "is_nested", False) else "meta" if t.is_meta else None)
    if kind is not None:
        raise ValueError(f"{path}: tensor {name!r} is a {kind} tensor ({t.dtype}, layout {t.layout}), not a plain "
                         "dense array; save it with .to_dense() / .dequantize() first")
    t = t.detach().cpu()
    t = _dense_view(path, name, t)
    if t.is_floating_point() and t.dtype not in (torch.float32, torch.float64, torch.float16):
        t = t.float()  # bfloat16 / fp8 widen exactly
    try:
        return t.numpy()
    except (TypeError, RuntimeError) as e:  # a dtype numpy has no twin for (e.g. uint16 in old torch)
        raise ValueError(f"{path}: tensor {name!r} ({t.dtype}) cannot be read as an array ({_first_line(e)})") from None
