"""The user-facing tools, apart from the engine: they import the library, never the reverse.

- ``cli.py``          the ``fpsim`` command (``python -m fpsim``); each command's package is
  imported only when that command runs;
- ``audit/``          ``fpsim audit``: which formats and loss scales keep a file of gradients,
  reading it with ``audit/tensorfiles.py`` (.npz / .npy / .safetensors / .pt, one tensor at a time);
- ``bench/``          ``fpsim bench``: how fast the emulation runs - ``timing.py`` (timing, the
  machine), ``steps.py`` (the training steps it times), ``rows.py`` (the training-step section),
  ``profile.py`` (``--profile``), ``labtime.py`` (``--labs``);
- ``gpu_check/``      ``fpsim gpu-check``: numpy against the cupy backend - ``ops.py`` (every op),
  ``task.py`` (the reference task), ``vs_torch.py`` (PyTorch on the same task);
- ``figures.py``      ``fpsim figures``: the figures of ``figures/`` and the shipped example dump;
- ``plots.py``        every figure fpsim draws, in one style (the labs draw with it too);
- ``reproduce.py``    ``fpsim reproduce``, with ``catalogue.py`` (the whole catalogue, ``--jobs N``);
- ``compareplot.py``  the one figure of a recipe comparison (``fpsim compare``, the labs);
- ``jsonout.py``      strict JSON for every ``--json``;
- ``torchref.py``     the PyTorch counterparts bench and gpu-check compare with (PyTorch is optional).
"""
