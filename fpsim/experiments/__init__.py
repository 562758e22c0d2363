"""The named training recipes and the reference task on which they differ.

- ``recipes.py`` :class:`Recipe`, :data:`RECIPES`, :data:`DEFAULT_RECIPES`, :data:`EXTENDED_RECIPES`,
  :func:`get_recipe` (each recipe described there);
- ``tasks.py``   :class:`ReferenceTask`, the autoencoder whose gradients are tiny (why: there);
- ``train.py``   :func:`run_recipe`, :func:`compare`, :func:`compare_seeds` and their :class:`RunResult`;
- ``report.py``  :func:`format_table`, :func:`format_seed_table`: the tables ``fpsim compare`` prints;
- ``tinygpt.py`` :class:`TinyGPTTask` (a 2-layer GPT sorting digits), its recipes and :data:`OVERFLOW`.
"""

from .recipes import DEFAULT_RECIPES, EXTENDED_RECIPES, RECIPES, Recipe, get_recipe
from .report import format_seed_table, format_table
from .tasks import ReferenceTask
from .tinygpt import OVERFLOW, TINYGPT_RECIPES, TinyGPTResult, TinyGPTTask, run_tinygpt
from .train import RunResult, compare, compare_seeds, run_recipe

__all__ = ["Recipe", "RECIPES", "get_recipe", "RunResult", "ReferenceTask", "run_recipe", "compare",
           "compare_seeds", "format_seed_table", "format_table", "DEFAULT_RECIPES", "EXTENDED_RECIPES",
           "TinyGPTTask", "TinyGPTResult", "TINYGPT_RECIPES", "OVERFLOW", "run_tinygpt"]
