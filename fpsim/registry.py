"""One registry kind for every extension point: tasks, recipes, findings, block formats, layer handlers.

A :class:`Registry` maps names to things of one kind.  Adding one is one line where the thing is
defined - ``@TASKS.register("reference")`` on a class, ``RECIPES.register(Recipe("fp32", ...))``
for an object with a ``name`` - and everything that lists the kind (the CLI's choices and help,
``fpsim reproduce --list``, the docs tables, the parametrized tests) reads the registry.  ``get``
of a name that is not there raises one ``ValueError`` naming the kind and the names that are
(lm-evaluation-harness's registry, torchao's handler table by config type, are the models).

Lookup is by name (case as registered) or, for :meth:`Registry.for_type`, by the type of an
object (the handler of a config, as torchao's ``quantize_`` finds its module handler).
"""

from __future__ import annotations

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

    def __init__(self, kind: str, *, check: Callable | None = None):
        self.kind = kind
        self._items: dict = {}
        self._check = check

    def register(self, obj=None, name=None, *, replace: bool = False):
        if obj is None or isinstance(obj, str):  # used as a decorator: @R.register() / @R.register("x")
            key = obj if name is None else name
            return lambda thing: self.register(thing, key, replace=replace)
        key = name if name is not None else getattr(obj, "name", None)
        if key is None:
            raise TypeError(f"register: a {self.kind} needs a name (give name=..., or give it a 'name' attribute)")
        if not isinstance(key, (str, type)):
            raise TypeError(f"register: a {self.kind}'s name must be a string, got {type(key).__name__}")
        if key in self._items and not replace and self._items[key] is not obj:
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
            obj = obj.factory()
            if self._check is not None:
                self._check(obj)
            self._items[key] = obj
        return obj

    def unregister(self, name):
        """Take ``name`` out again and return its thing (a test's or a notebook's temporary entry)."""
        if name not in self._items:
            raise ValueError(f"unknown {self.kind} {self._label(name)!r}; known: {', '.join(self.names())}")
        return self._items.pop(name)

    def get(self, name):
        if isinstance(name, str):
            if name in self._items:
                return self._built(name)
            raise ValueError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}")
        if any(v is name for v in self._items.values()):
            return name
        raise TypeError(f"a {self.kind} is given by name (a string), got {type(name).__name__}")

    def for_type(self, obj):
        """The entry registered under the type of ``obj`` (or its nearest base that has one)."""
        for cls in type(obj).__mro__:
            if cls in self._items:
                return self._built(cls)
        known = ", ".join(self._label(k) for k in self._items)
        raise TypeError(f"no {self.kind} for a {type(obj).__name__}; known: {known}")

    def names(self) -> list[str]:
        return [self._label(k) for k in self._items]

    def items(self):
        return [(self._label(k), self._built(k)) for k in list(self._items)]

    def values(self) -> list:
        return [self._built(k) for k in list(self._items)]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, name) -> bool:
        return name in self._items

    def __getitem__(self, name):
        return self.get(name)

    def __repr__(self) -> str:
        return f"<Registry of {len(self)} {self.kind}s: {', '.join(self.names())}>"

    @staticmethod
    def _label(key) -> str:
        return key.__name__ if isinstance(key, type) else key


class _Lazy:
    """A registered thing not built yet: :meth:`Registry.register_lazy`'s factory."""

    __slots__ = ("factory",)

    def __init__(self, factory: Callable):
        self.factory = factory
