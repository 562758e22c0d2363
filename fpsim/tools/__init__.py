"""The user-facing tools, apart from the engine: they import the library, never the reverse.

- ``cli.py``          the ``fpsim`` command (``python -m fpsim``);
- ``audit.py``        which formats and loss scales keep a file of gradients (``fpsim audit``),
  reading it with ``tensorfiles.py`` (.npz / .npy / .safetensors / .pt, one tensor at a time);
- ``plots.py``        every figure fpsim draws, in one style;
- ``figures.py``      the figures of ``figures/`` and the shipped example dump (``fpsim figures``);
- ``bench.py``        how fast the emulation runs (``fpsim bench``), with ``benchtime.py`` (timing,
  the machine) and ``benchsteps.py`` (the training steps it times);
- ``gpu_check.py``    numpy against the cupy backend (``fpsim gpu-check``): ``gpu_ops.py`` (every op),
  ``gpu_task.py`` (the reference task), ``gpu_torch.py`` (PyTorch on the same task);
- ``torchref.py``     the PyTorch counterparts bench and gpu-check compare with (PyTorch is optional).
"""
