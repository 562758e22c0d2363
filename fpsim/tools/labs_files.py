"""Where the lab notebooks are, and a fresh set of them copied where a learner wants it.

One copy of the notebooks lives in the repository, in ``labs/``.  A wheel carries that folder as
the package data ``fpsim/labs/notebooks/`` (pyproject.toml maps it there), so an installed fpsim
has the labs and their README without a checkout; a checkout (or an editable install)
finds them in ``labs/`` beside the package.  :func:`copy_labs` writes a set into a folder of the
learner's: a notebook already there that differs from the shipped one (the learner's answers, a
saved output) is kept unless ``overwrite`` is asked for.
"""

from __future__ import annotations

import shutil
from pathlib import Path

__all__ = ["notebook_dir", "lab_files", "copy_labs", "notebook_client", "LAB_GLOB"]

LAB_GLOB = "[0-9][0-9]_*.ipynb"  # a lab is NN_name.ipynb


def notebook_dir() -> Path:
    """The folder of the labs this fpsim has: ``fpsim/labs/notebooks/`` in an installed wheel,
    else ``labs/`` of the checkout the package sits in; a ValueError saying which were looked
    for when neither holds a lab."""
    package = Path(__file__).resolve().parents[1]
    candidates = (package / "labs" / "notebooks", package.parent / "labs")
    for d in candidates:
        if any(d.glob(LAB_GLOB)):
            return d
    raise ValueError(f"this fpsim has no lab notebooks: neither {candidates[0]} (an installed wheel) nor "
                     f"{candidates[1]} (a checkout) holds NN_*.ipynb; reinstall fpsim, or name a folder with "
                     f"--labs-dir")


def lab_files(directory=None) -> list[Path]:
    """The notebooks ``NN_*.ipynb`` in ``directory`` (default: :func:`notebook_dir`), by number; a
    ValueError naming ``--labs-dir`` when a folder given is not one."""
    if directory is None:
        d = notebook_dir()
    else:
        d = Path(directory)
        if not d.is_dir():
            raise ValueError(f"--labs-dir: {d} is not a folder")
    return sorted(d.glob(LAB_GLOB))


def notebook_client(nb, **kwargs):
    """An ``nbclient.NotebookClient`` for ``nb`` (``kwargs`` as nbclient takes them) whose kernel
    manager gives the kernel CurveZMQ keys where jupyter_client, pyzmq and the kernel support them
    (``KernelManager.transport_encryption = "auto"``, jupyter_client >= 8.10): its messages are then
    encrypted, and ipykernel (>= 7.4) does not log "Kernel is running over TCP without encryption"
    for every lab.  Older versions neither offer the keys nor log the warning: the client is nbclient's
    own."""
    import nbclient
    import zmq
    from jupyter_client.manager import KernelManager
    from traitlets.config import Config

    config = Config()
    if "transport_encryption" in KernelManager.class_trait_names() and zmq.has("curve"):
        config.KernelManager.transport_encryption = "auto"  # keys only for a kernelspec that declares curve
    return nbclient.NotebookClient(nb, config=config, **kwargs)


def copy_labs(paths: list[Path], target, overwrite: bool = False) -> tuple[list[Path], list[Path]]:
    """Copy the notebooks ``paths`` (and the README.md beside them) into the folder ``target``,
    made if missing.  A file already there with the same bytes is left as it is; one that differs
    is kept (the learner's work) unless ``overwrite``.  Returns (written, kept)."""
    target = Path(target)
    if target.exists() and not target.is_dir():
        raise ValueError(f"--copy: {target} exists and is not a folder")
    target.mkdir(parents=True, exist_ok=True)
    sources = list(paths)
    readme = paths[0].parent / "README.md" if paths else None
    if readme is not None and readme.is_file():
        sources.append(readme)
    written, kept = [], []
    for src in sources:
        dst = target / src.name
        if dst.exists() and dst.read_bytes() == src.read_bytes():
            continue
        if dst.exists() and not overwrite:
            kept.append(dst)
            continue
        shutil.copyfile(src, dst)
        written.append(dst)
    return written, kept
