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


# -- plugins: installed packages' entry points ----------------------------------------------------

def _install(root, dist: str, group: str, entries: dict, module: str, source: str) -> None:
    """A package as pip would leave it on sys.path: its module and a dist-info holding its entry
    points (what ``[project.entry-points."group"]`` in its pyproject.toml writes)."""
    (root / f"{module}.py").write_text(source)
    info = root / f"{dist}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items()))


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("FPSIM_PLUGINS", raising=False)
    return tmp_path


def test_a_plugins_names_are_listed_and_its_module_imported_on_first_use(plugins):
    import sys

    _install(plugins, "widgets-extra", "fpsim.test_widgets", {"gear": "widgets_extra:GEAR", "cog": "widgets_extra:Cog"},
             "widgets_extra", "IMPORTED = True\nclass Thing:\n    name = 'gear'\nGEAR = Thing()\nclass Cog:\n    pass\n")
    r = Registry("widget", entry_points="fpsim.test_widgets")
    r.register(Thing("built-in"))
    assert r.names() == ["built-in", "gear", "cog"] and "gear" in r and len(r) == 3
    assert "widgets_extra" not in sys.modules  # listed from the metadata, nothing imported
    assert r.get("gear").name == "gear" and r.get("cog").__name__ == "Cog"
    assert sys.modules["widgets_extra"].IMPORTED


def test_a_broken_plugin_breaks_its_own_name_only_and_says_whose_it_is(plugins):
    _install(plugins, "bad-widgets", "fpsim.test_widgets2", {"broken": "bad_widgets:NOPE"}, "bad_widgets", "x = 1\n")
    r = Registry("widget", entry_points="fpsim.test_widgets2")
    r.register(Thing("fine"))
    assert r.names() == ["fine", "broken"] and r.get("fine").name == "fine"
    with pytest.raises(RuntimeError, match=r"^fpsim: the widget 'broken' of bad-widgets \(entry point "
                                           r"fpsim.test_widgets2 = bad_widgets:NOPE\) could not be loaded: "
                                           r"AttributeError: .*NOPE"):
        r.get("broken")


def test_a_plugin_may_not_take_a_name_fpsim_has(plugins):
    _install(plugins, "rival", "fpsim.test_widgets3", {"fp32": "rival:X"}, "rival", "X = 1\n")
    r = Registry("recipe", entry_points="fpsim.test_widgets3")
    mine = r.register(Thing("fp32"))
    with pytest.warns(RuntimeWarning, match=r"the recipe 'fp32' of rival \(entry point fpsim.test_widgets3\) is "
                                            r"skipped: fpsim has a recipe of that name"):
        assert r.get("fp32") is mine and r.names() == ["fp32"]


def test_a_plugin_that_registers_itself_on_import_is_the_one_thing(plugins):
    """The one-file style (``RECIPES.register(...)`` at the bottom of the module) declared as an
    entry point as well: importing it registers the object, which replaces the placeholder."""
    import importlib

    _install(plugins, "selfreg", "fpsim.test_widgets4", {"self": "selfreg:SELF"}, "selfreg",
             "import test_registry_target as t\nclass Thing:\n    name = 'self'\nSELF = t.R.register(Thing())\n")
    r = Registry("widget", entry_points="fpsim.test_widgets4")
    target = plugins / "test_registry_target.py"
    target.write_text("R = None\n")
    importlib.import_module("test_registry_target").R = r
    assert r.names() == ["self"]
    got = r.get("self")
    assert got is importlib.import_module("selfreg").SELF and r.get("self") is got


def test_fpsim_plugins_0_turns_the_discovery_off(plugins, monkeypatch):
    _install(plugins, "off-widgets", "fpsim.test_widgets5", {"gear": "off_widgets:G"}, "off_widgets", "G = 1\n")
    monkeypatch.setenv("FPSIM_PLUGINS", "0")
    assert Registry("widget", entry_points="fpsim.test_widgets5").names() == []


def test_a_plugin_recipe_runs_in_fpsim_compare(tmp_path):
    """End to end, as a user's package would: a recipe declared in the fpsim.recipes group is a choice
    of ``fpsim compare --recipes`` and trains beside the built-in ones."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    _install(tmp_path, "my-recipes", "fpsim.recipes", {"bf16-mine": "my_recipes:MINE"}, "my_recipes",
             "from fpsim.experiments import Recipe\n"
             "MINE = Recipe('bf16-mine', 'bfloat16', master=True, description='a plugin: bfloat16 + masters')\n")
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), root]), "OPENBLAS_NUM_THREADS": "1"}
    env.pop("FPSIM_PLUGINS", None)
    out = subprocess.run([sys.executable, "-m", "fpsim.tools.cli", "compare", "--recipes", "fp32", "bf16-mine",
                          "--steps", "2", "--quiet", "--figure", "none"], capture_output=True, text=True, timeout=300,
                         env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "\nbf16-mine " in out.stdout and "\nfp32 " in out.stdout
