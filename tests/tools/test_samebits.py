"""The promise, tested on this machine standing in for many: ``fpsim bits --configs`` runs a fixed set
of computations (the arithmetic, the reference task under the default recipes, the tiny GPT in
float16 and bfloat16, a block-scaled and a tensor-core recipe) in fresh processes under every
OpenBLAS kernel family this CPU can run and with numpy's AVX-512 and AVX2 loops turned off, and
every fingerprint must agree - while numpy's own float32 product and exp, the control, change."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fpsim.tools import samebits


@pytest.mark.slow
def test_every_configuration_gives_the_same_bits():
    done = subprocess.run([sys.executable, "-m", "fpsim.tools.cli", "bits", "--configs", "--json"],
                          capture_output=True, text=True, timeout=1500)
    res = json.loads(done.stdout)
    bad = {r["config"]: r["differ"] for r in res["configs"] if r["differ"]}
    assert done.returncode == 0 and res["same_bits"] and not bad, bad
    assert len(res["configs"]) == len(samebits.configurations()) >= 2
    kernels = {r["blas"] for r in res["configs"]}
    if len(kernels) > 1:  # the configurations really change what the libraries compute
        assert sum(r["numpy_differs"] for r in res["configs"]) >= len(kernels) - 1


def test_fingerprints_are_of_every_bit():
    base = samebits._digest({"x": [1.0, 2.0]})
    assert samebits._digest({"x": [1.0, float.fromhex("0x1.0000000000001p+1")]}) != base
    import numpy as np

    a = np.float32([1.0, -0.0])
    assert samebits._digest(a) != samebits._digest(np.float32([1.0, 0.0]))
    with pytest.raises(ValueError, match="unknown item 'nope'; known: arithmetic"):
        samebits.fingerprints(["nope"])
