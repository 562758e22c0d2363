"""fpsim.registry.Registry: the one registry kind of every extension point."""

import pytest

from fpsim.registry import Registry


class Thing:
    def __init__(self, name):
        self.name = name


def test_register_by_call_and_by_decorator_keeps_the_order_and_returns_the_thing():
    r = Registry("widget")
    a = Thing("a")
    assert r.register(a) is a  # named by its own ``name``
    b = r.register(Thing("ignored"), "b")  # named by the call

    @r.register("c")
    class C:
        pass

    @r.register()
    class D:
        name = "d"

    assert r.names() == ["a", "b", "c", "d"] and list(r) == ["a", "b", "c", "d"] and len(r) == 4
    assert r.get("a") is a and r["b"] is b and r.get("c") is C and r.get("d") is D
    assert "a" in r and "z" not in r
    assert r.items() == [("a", a), ("b", b), ("c", C), ("d", D)] and r.values() == [a, b, C, D]
    assert repr(r) == "<Registry of 4 widgets: a, b, c, d>"


def test_get_of_an_unknown_name_names_the_kind_and_every_known_name():
    r = Registry("task")
    r.register(Thing("reference"))
    r.register(Thing("tinygpt"))
    with pytest.raises(ValueError, match=r"^unknown task 'gpt2'; known: reference, tinygpt$"):
        r.get("gpt2")


def test_a_registered_thing_passes_through_get_and_anything_else_is_refused():
    r = Registry("recipe")
    a = r.register(Thing("a"))
    assert r.get(a) is a
    with pytest.raises(TypeError, match="a recipe is given by name"):
        r.get(Thing("a"))  # the same name, another object: not this registry's
    with pytest.raises(TypeError, match="given by name"):
        r.get(3)


def test_a_name_twice_is_an_error_unless_replaced_and_the_same_object_again_is_not():
    r = Registry("finding")
    a = r.register(Thing("a"))
    assert r.register(a) is a  # registering the same object again (a module imported twice) is fine
    with pytest.raises(ValueError, match="a finding named 'a' is registered already"):
        r.register(Thing("a"))
    new = r.register(Thing("a"), replace=True)
    assert r.get("a") is new and len(r) == 1


def test_a_thing_without_a_name_or_with_a_bad_name_is_refused():
    r = Registry("format")
    with pytest.raises(TypeError, match="a format needs a name"):
        r.register(object())
    with pytest.raises(TypeError, match="a format's name must be a string, got int"):
        r.register(Thing(7))


def test_check_sees_every_thing_before_it_is_registered():
    def only_things(obj):
        if not isinstance(obj, Thing):
            raise TypeError(f"not a Thing: {type(obj).__name__}")

    r = Registry("thing", check=only_things)
    r.register(Thing("ok"))
    with pytest.raises(TypeError, match="not a Thing: int"):
        r.register(5, "five")
    assert r.names() == ["ok"]


def test_for_type_finds_the_handler_of_an_objects_type_or_its_nearest_base():
    class Config:
        pass

    class Special(Config):
        pass

    class Other:
        pass

    r = Registry("handler")
    r.register(len, Config)
    r.register(abs, Special)
    assert r.for_type(Special()) is abs and r.for_type(Config()) is len
    assert r.names() == ["Config", "Special"]

    class Deeper(Special):
        pass

    assert r.for_type(Deeper()) is abs
    with pytest.raises(TypeError, match="no handler for a Other; known: Config, Special"):
        r.for_type(Other())


def test_unregister_takes_a_thing_out_and_an_unknown_name_says_what_is_known():
    r = Registry("task")
    a = r.register(Thing("a"))
    r.register(Thing("b"))
    assert r.unregister("a") is a and r.names() == ["b"]
    with pytest.raises(ValueError, match="unknown task 'a'; known: b"):
        r.unregister("a")


def test_a_lazy_entry_is_listed_at_once_and_built_once_when_first_asked_for():
    built = []

    def make():
        built.append(1)
        return Thing("slow")

    r = Registry("recipe", check=lambda obj: built.append("checked"))
    r.register_lazy("slow", make)
    assert r.names() == ["slow"] and "slow" in r and built == []
    thing = r.get("slow")
    assert thing.name == "slow" and built == [1, "checked"]
    assert r.get("slow") is thing and r.values() == [thing] and r.get(thing) is thing and built == [1, "checked"]
    with pytest.raises(ValueError, match="registered already"):
        r.register_lazy("slow", make)
