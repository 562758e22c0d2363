"""One registry kind for every extension point: tasks, recipes, findings, block formats, layer handlers.

A :class:`Registry` maps names to things of one kind.  Adding one is one line where the thing is
defined - ``@TASKS.register("reference")`` on a class, ``RECIPES.register(Recipe("fp32", ...))``
for an object with a ``name`` - and everything that lists the kind (the CLI's choices and help,
``fpsim reproduce --list``, the docs tables, the parametrized tests) reads the registry.  ``get``
of a name that is not there raises one ``ValueError`` naming the kind and the names that are
(lm-evaluation-harness's registry, torchao's handler table by config type, are the models).

Lookup is by name (case as registered) or, for :meth:`Registry.for_type`, by the type of an
object (the handler of a config, as torchao's ``quantize_`` finds its module handler).

Plugins: a registry made with ``entry_points="fpsim.recipes"`` (tasks ``fpsim.tasks``, recipes
``fpsim.recipes``, findings ``fpsim.findings``, block formats ``fpsim.block_formats``) also lists
what installed packages declare in that entry-point group, each entry ``name = "module:object"``
(pyproject.toml: ``[project.entry-points."fpsim.recipes"] my-recipe = "mypkg.recipes:MY_RECIPE"``).
The names are read from the packages' metadata the first time the registry is read, and an object
is imported when it is first asked for - so a broken plugin breaks only its own name, with an
error naming the package.  A plugin's name that fpsim (or an earlier plugin) has already is
skipped with a warning.  ``FPSIM_PLUGINS=0`` turns the discovery off.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator

__all__ = ["Registry"]


class Registry:
    """Named things of one ``kind`` (a word for the messages: "task", "recipe", "finding", ...).

    - ``register(obj)`` / ``register(obj, name)``: add ``obj`` under ``name`` (default
      ``obj.name``, or for a class its ``name`` attribute); returns ``obj``.
    - ``register("name")`` / ``register()``: the same as a decorator.
    - ``get(name)``: the thing, or ``ValueError: unknown task 'x'; known: a, b``; a registered
      object itself passes through (so every API takes a name or the thing).
    - ``register_lazy(name, factory)``: the name now, the thing built by ``factory()`` on first use.
    - ``unregister(name)``: take it out again (a test's temporary entry).
    - ``names()``, ``items()``, iteration (names, in registration order), ``len``, ``in``.
    - ``for_type(obj)``: the thing registered under ``type(obj)`` or one of its bases.

    Registering a name twice is an error (two things would answer to one name), unless
    ``replace=True`` says so.
    """

    def __init__(self, kind: str, *, check: Callable | None = None, entry_points: str | None = None):
        self.kind = kind
        self._items: dict = {}
        self._check = check
        self.entry_points = entry_points  # the entry-point group its plugins are declared in, or None
        self._discovered = entry_points is None

    def _discover(self) -> None:
        """Once, on the first read: each installed package's entries of the group, registered lazily
        (see the module docstring)."""
        if self._discovered:
            return
        self._discovered = True
        if os.environ.get("FPSIM_PLUGINS", "1").strip() == "0":
            return
        from importlib.metadata import entry_points

        for ep in entry_points(group=self.entry_points):
            dist = getattr(getattr(ep, "dist", None), "name", None) or "an installed package"
            if ep.name in self._items:
                warnings.warn(f"fpsim: the {self.kind} {ep.name!r} of {dist} (entry point {self.entry_points}) is "
                              f"skipped: fpsim has a {self.kind} of that name", RuntimeWarning, stacklevel=3)
                continue
            self._items[ep.name] = _Lazy(_plugin(ep, dist, self.kind, self.entry_points), plugin=True)

    def register(self, obj=None, name=None, *, replace: bool = False):
        if obj is None or isinstance(obj, str):  # used as a decorator: @R.register() / @R.register("x")
            key = obj if name is None else name
            return lambda thing: self.register(thing, key, replace=replace)
        key = name if name is not None else getattr(obj, "name", None)
        if key is None:
            raise TypeError(f"register: a {self.kind} needs a name (give name=..., or give it a 'name' attribute)")
        if not isinstance(key, (str, type)):
            raise TypeError(f"register: a {self.kind}'s name must be a string, got {type(key).__name__}")
        held = self._items.get(key)
        if held is not None and not replace and held is not obj and not (isinstance(held, _Lazy) and held.plugin):
            raise ValueError(f"register: a {self.kind} named {self._label(key)!r} is registered already")
        if self._check is not None:
            self._check(obj)
        self._items[key] = obj
        return obj

    def register_lazy(self, name: str, factory: Callable, *, replace: bool = False) -> None:
        """Register ``name`` now and build its thing (``factory()``) when it is first asked for:
        the name is listed at once, and importing the module that registers it builds nothing."""
        if name in self._items and not replace:
            raise ValueError(f"register: a {self.kind} named {name!r} is registered already")
        self._items[name] = _Lazy(factory)

    def _built(self, key):
        """The thing under ``key``, built now if it was registered lazily (and checked then)."""
        obj = self._items[key]
        if isinstance(obj, _Lazy):
            built = obj.factory()
            if self._items.get(key) is not obj:  # importing the plugin registered it itself
                return self._items[key]
            if self._check is not None:
                self._check(built)
            self._items[key] = obj = built
        return obj

    def unregister(self, name):
        """Take ``name`` out again and return its thing (a test's or a notebook's temporary entry)."""
        self._discover()
        if name not in self._items:
            raise ValueError(f"unknown {self.kind} {self._label(name)!r}; known: {', '.join(self.names())}")
        return self._items.pop(name)

    def get(self, name):
        self._discover()
        if isinstance(name, str):
            if name in self._items:
                return self._built(name)
            raise ValueError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}")
        if any(v is name for v in self._items.values()):
            return name
        raise TypeError(f"a {self.kind} is given by name (a string), got {type(name).__name__}")

    def for_type(self, obj):
        """The entry registered under the type of ``obj`` (or its nearest base that has one)."""
        self._discover()
        for cls in type(obj).__mro__:
            if cls in self._items:
                return self._built(cls)
        known = ", ".join(self._label(k) for k in self._items)
        raise TypeError(f"no {self.kind} for a {type(obj).__name__}; known: {known}")

    def names(self) -> list[str]:
        self._discover()
        return [self._label(k) for k in self._items]

    def items(self):
        self._discover()
        return [(self._label(k), self._built(k)) for k in list(self._items)]

    def values(self) -> list:
        self._discover()
        return [self._built(k) for k in list(self._items)]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        self._discover()
        return len(self._items)

    def __contains__(self, name) -> bool:
        self._discover()
        return name in self._items

    def __getitem__(self, name):
        return self.get(name)

    def __repr__(self) -> str:
        return f"<Registry of {len(self)} {self.kind}s: {', '.join(self.names())}>"

    @staticmethod
    def _label(key) -> str:
        return key.__name__ if isinstance(key, type) else key


class _Lazy:
    """A registered thing not built yet: :meth:`Registry.register_lazy`'s factory (``plugin``: an
    installed package's entry point, which the package's own ``register`` call may replace)."""

    __slots__ = ("factory", "plugin")

    def __init__(self, factory: Callable, plugin: bool = False):
        self.factory = factory
        self.plugin = plugin


def _plugin(ep, dist: str, kind: str, group: str) -> Callable:
    """The factory of a plugin's entry: ``ep.load()``, its failure one error naming the package."""

    def load():
        try:
            return ep.load()
        except Exception as e:
            raise RuntimeError(f"fpsim: the {kind} {ep.name!r} of {dist} (entry point {group} = {ep.value}) "
                               f"could not be loaded: {type(e).__name__}: {e}") from e

    return load
