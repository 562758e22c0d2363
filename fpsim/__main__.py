"""``python -m fpsim`` is the ``fpsim`` command."""

import sys

from .cli import main

sys.exit(main())
