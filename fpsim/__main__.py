"""``python -m fpsim`` is the ``fpsim`` command."""

import sys

from .tools.cli import main

sys.exit(main())
