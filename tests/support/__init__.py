"""Support code for the tests (``tests/`` is on sys.path, as for ``helpers``): ``cupy_standin``."""
