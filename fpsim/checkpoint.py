"""Checkpoints: model, optimizer, loss scaler and fp8 scaling state in one ``.npz``, bit for
bit, without pickle.

Every array is stored as its raw bits (unsigned integers of the format's width) next to the
format's name, so bfloat16 and fp8 survive the round trip exactly and the file needs nothing
but numpy to read (``np.load(..., allow_pickle=False)``).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np

from .formats import UINT_VIEWS, classify, get_format, tensor_format
from .statedict import Problems, all_or_nothing

__all__ = ["save", "load"]

_UINT = UINT_VIEWS  # bytes -> the unsigned view (fpsim.formats.bitviews)


def _pack(prefix: str, arr, out: dict) -> None:
    if isinstance(arr, int | float | np.integer | np.floating) and np.ndim(arr) == 0 and not hasattr(arr, "dtype"):
        out[f"{prefix}"] = np.asarray(arr)
        out[f"{prefix}#kind"] = np.asarray("scalar")
        return
    a = np.asarray(arr)
    if a.dtype.kind in "iu" or a.ndim == 0 and a.dtype.kind != "f" and a.dtype.kind != "V":
        out[prefix] = a
        out[f"{prefix}#kind"] = np.asarray("scalar")
        return
    fmt = get_format(a.dtype)
    out[prefix] = np.ascontiguousarray(a).view(_UINT[a.dtype.itemsize]).reshape(a.shape)  # keeps 0-d arrays 0-d
    out[f"{prefix}#fmt"] = np.asarray(fmt.name)


def _unpack(data, key: str):
    if f"{key}#fmt" in data:
        fmt = tensor_format(str(data[f"{key}#fmt"]))  # fp6 / fp4 / e8m0 store no tensor: named, refused
        bits = data[key]
        if bits.dtype != _UINT[fmt.dtype.itemsize]:
            raise ValueError(f"holds {bits.dtype} values, not the raw bits of {fmt.name}")
        return bits.view(fmt.dtype)
    v = data[key]
    return v.item() if v.ndim == 0 else v


def _has(obj, *names) -> bool:
    return all(callable(getattr(obj, n, None)) for n in names)


def _check_parts(owner: str, model, optimizer, scaler, fp8) -> None:
    """One TypeError naming the argument that holds the wrong kind of object, before anything is
    read or written: the checkpoint takes each part's ``state_dict`` / ``load_state_dict``."""
    if not _has(model, "state_dict", "load_state_dict", "named_parameters"):
        raise TypeError(f"{owner}: model must be an fpsim Module (fpsim.nn.Module), got {type(model).__name__}")
    if optimizer is not None and not _has(optimizer, "state_dict", "load_state_dict", "master_params"):
        raise TypeError(f"{owner}: optimizer must be an fpsim optimizer (fpsim.optim.SGD, Adam, ...) or None, "
                        f"got {type(optimizer).__name__}")
    if scaler is not None and not _has(scaler, "state_dict", "load_state_dict"):
        raise TypeError(f"{owner}: scaler must be a GradScaler or StaticScaler (fpsim.amp) or None, "
                        f"got {type(scaler).__name__}")
    if fp8 is not None and not _has(fp8, "state_dict", "load_state_dict", "_snapshot", "_restore"):
        raise TypeError(f"{owner}: fp8 must be the ScalingGroup fpsim.lowp.convert(model, recipe) returned (it "
                        f"holds the scales and amax histories), not the recipe, or None; got {type(fp8).__name__} "
                        "(a block-scaled model keeps no scaling state: save it without fp8=)")


def save(path, model, optimizer=None, scaler=None, fp8=None) -> Path:
    """Write model (and optimizer, GradScaler, fp8 scaling - the ``ScalingGroup`` that
    ``fpsim.lowp.convert`` returned) state to ``path`` (.npz), atomically: a failure half-way
    leaves any earlier file at ``path`` as it was.  An argument holding the wrong kind of object (a
    recipe as ``fp8``) is refused before anything is written."""
    _check_parts("checkpoint.save", model, optimizer, scaler, fp8)
    path = Path(path)
    out: dict = {}
    for name, arr in model.state_dict().items():
        _pack(f"model/{name}", arr, out)
    if optimizer is not None:
        for name, arr in optimizer.state_dict().items():
            _pack(f"optim/{name}", arr, out)
    if scaler is not None:
        for name, v in scaler.state_dict().items():
            _pack(f"scaler/{name}", v, out)
    if fp8 is not None:
        for name, v in fp8.state_dict().items():
            _pack(f"fp8/{name}", v, out)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as fh:
            np.savez(fh, **out)
        os.replace(tmp, path)
    except BaseException:  # disk full, path is a directory, interrupted: no .tmp left behind
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    return path


def _expected_formats(model, optimizer, saved_optim: dict) -> dict:
    """``"model/name"`` / ``"optim/key"`` -> the format that entry is loaded into.  Optimizer
    entries only where the file's optimizer had master weights exactly when this one has (else
    the optimizer's own load names the entries that do not fit)."""
    want = {f"model/{n}": p.fmt for n, p in model.named_parameters()}
    if optimizer is not None and (optimizer.master is not None) == any(k.startswith("master.") for k in saved_optim):
        for i, t in enumerate(optimizer.master_params()):
            want[f"optim/master.{i}"] = t.fmt
            for name in ("exp_avg", "exp_avg_sq", "momentum_buffer"):
                want[f"optim/state.{i}.{name}"] = t.fmt
            want[f"optim/state.{i}.kahan_comp"] = optimizer.params[i].fmt  # in the parameter's own format
    return want


def _format_changes(path, parts, model, optimizer, convert: bool) -> dict:
    """Entries saved in another format than the one they load into.  Refused (ValueError naming
    each, nothing changed) unless ``convert``; then what the rounding did to each, by name."""
    want = _expected_formats(model, optimizer, parts["optim"])
    changes = {}
    for head in ("model", "optim"):
        for name, v in parts[head].items():
            f = want.get(f"{head}/{name}")
            if f is None or not isinstance(v, np.ndarray) or v.dtype == f.dtype:
                continue
            try:
                saved = get_format(v.dtype).name
            except ValueError:
                raise ValueError(f"checkpoint {path}: {head}/{name} holds {v.dtype} values, which are not one of "
                                 "fpsim's formats (nothing changed)") from None
            c = classify(v, f).counts() if convert else {}
            changes[f"{head}/{name}"] = {"from": saved, "to": f.name, "values": int(v.size),
                                         **{k: c.get(k, 0) for k in ("overflow", "underflow", "inexact")}}
    if changes and not convert:
        listed = ", ".join(f"{k} ({c['from']} -> {c['to']})" for k, c in list(changes.items())[:4])
        more = f" and {len(changes) - 4} more" if len(changes) > 4 else ""
        raise ValueError(f"checkpoint {path}: saved in other formats than the model's: {listed}{more}; pass "
                         "convert_formats=True to round them into the model's formats (nothing changed)")
    return changes


def load(path, model, optimizer=None, scaler=None, fp8=None, *, convert_formats: bool = False) -> dict:
    """Restore what :func:`save` wrote.  A missing or unreadable file, or entries that do not
    fit the model, raise before anything is changed.

    An entry saved in another format than the one it loads into (a bfloat16 checkpoint into a
    float16 model) is refused, naming it and both formats, because the rounding can overflow or
    flush: 1e5 in bfloat16 is inf in float16.  ``convert_formats=True`` rounds such entries into
    the model's formats (to nearest, as ``fpsim.cast``) and returns, per entry, ``{"from", "to",
    "values", "overflow", "underflow", "inexact"}`` - how many values became inf/NaN, flushed
    to zero or changed.  Without conversions the result is ``{}``."""
    _check_parts("checkpoint.load", model, optimizer, scaler, fp8)
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except Exception as e:  # truncated, bad CRC (BadZipFile, zlib.error, EOFError), a damaged header (NotImplementedError)
        raise ValueError(f"checkpoint {path} could not be read as .npz: {e}") from None
    parts: dict[str, dict] = {"model": {}, "optim": {}, "scaler": {}, "fp8": {}}
    for key in data:
        if "#" in key:
            continue
        head, _, name = key.partition("/")
        if head not in parts:
            raise ValueError(f"checkpoint {path}: unexpected entry {key!r}")
        try:
            parts[head][name] = _unpack(data, key)
        except (ValueError, TypeError) as e:  # a format name that is none, bits that do not fit it
            raise ValueError(f"checkpoint {path}: entry {key!r} is unreadable ({e})") from None
    # Check what can be checked here before changing anything; each part's own load checks
    # the rest first, and a part failing after another has loaded rolls them all back.
    problems = Problems(f"checkpoint {path}", "model")
    problems.check_keys(parts["model"], required=dict(model.named_parameters()))
    problems.raise_if_any()
    if optimizer is not None and not parts["optim"]:
        raise ValueError(f"checkpoint {path} holds no optimizer state")
    if fp8 is not None and not parts["fp8"]:
        raise ValueError(f"checkpoint {path} holds no fp8 scaling state")
    if scaler is not None and getattr(scaler, "is_enabled", lambda: True)() and not parts["scaler"]:
        raise ValueError(f"checkpoint {path} holds no loss-scaler state (saved without scaler=, or from a "
                         "disabled GradScaler); nothing changed")
    changes = _format_changes(path, parts, model, optimizer, convert_formats)
    undo = [(model.state_dict, model.load_state_dict)]
    if optimizer is not None:
        undo.append((optimizer.state_dict, optimizer.load_state_dict))
    if fp8 is not None:  # its internal snapshot works in the middle of a step too
        undo.append((fp8._snapshot, fp8._restore))
    with all_or_nothing(*undo):
        model.load_state_dict(parts["model"])
        if fp8 is not None:  # checks its names against the model's fp8 tensors first
            fp8.load_state_dict(parts["fp8"])
        if optimizer is not None:
            optimizer.load_state_dict(parts["optim"])
        if scaler is not None:  # last: its own load changes nothing when it fails
            scaler.load_state_dict(parts["scaler"])
    return changes
