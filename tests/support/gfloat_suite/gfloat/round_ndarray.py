"""gfloat.round_ndarray is both a module (its tests import helpers from it) and a function."""

import sys
import types

import numpy as np


def _rnitp(x, pred, int_type):
    f = np.floor(x)
    i = f.astype(int_type)
    return i + ((x > f + 0.5) | ((x == f + 0.5) & ~pred(i))).astype(int_type)


def _rnite(x, int_type):
    return _rnitp(x, lambda v: v & 1 == 0, int_type)


def _rnito(x, int_type):
    return _rnitp(x, lambda v: v & 1 == 1, int_type)


class _Callable(types.ModuleType):
    def __call__(self, *args, **kwargs):
        from . import _round_ndarray

        return _round_ndarray(*args, **kwargs)


sys.modules[__name__].__class__ = _Callable
