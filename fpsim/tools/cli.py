"""The ``fpsim`` command.  Each subcommand is a thin layer over a public function."""

from __future__ import annotations

import argparse
import math
import re
import sys

from ..formats import format_names, get_format
from ..textable import text_table
from .allocator import keep_freed_memory


def _named(lookup):
    """An argparse type: the canonical name ``lookup(text).name``; lookup's ValueError (an
    unknown name, with the known ones) becomes argparse's error."""

    def parse(text: str) -> str:
        try:
            return lookup(text).name
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse


def _get_recipe(name: str):
    from ..experiments import get_recipe  # imported when a recipe is named: `fpsim formats` stays light

    return get_recipe(name)


_fmt_arg = _named(get_format)
_recipe_arg = _named(_get_recipe)


def _number_arg(convert, kind: str, ok, message: str):
    """An argparse type: ``convert(text)`` (``"expected {kind}"`` where it fails), then
    ``ok(value)``; ``message`` (with ``{text}``) where that is false."""

    def parse(text: str):
        try:
            v = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
        if not ok(v):
            raise argparse.ArgumentTypeError(message.format(text=repr(text)))
        return v

    return parse


_positive_float = _number_arg(float, "a number", lambda v: v > 0 and v != float("inf"),
                              "expected a finite number > 0, got {text}")
_finite_float = _number_arg(float, "a number", math.isfinite, "expected a finite number, got {text}")
_seed_arg = _number_arg(int, "a whole number", lambda v: v >= 0, "a seed is a whole number >= 0, got {text}")
_positive_int = _number_arg(int, "a whole number", lambda v: v >= 1, "expected a number >= 1, got {text}")


def cmd_formats(args) -> int:
    from ..formats.listing import FORMAT_COLUMNS, format_rows

    print("\n".join(text_table(FORMAT_COLUMNS, format_rows(include_all=args.all))))
    print(f"\naliases: {format_names().split('(aliases: ')[1].rstrip(')')}")
    if not args.all:
        print("(--all adds ocp_int8 and the IEEE P3109 formats p3109_k<bits>p<precision><s|u><e|f>)")
    return 0


def cmd_example(args) -> int:
    from ..examples import format_steps, scaling_example, smallest_surviving_update, vanishing_update

    custom = args.grad is not None or args.scale is not None
    cases = [(args.grad if args.grad is not None else 1e-8,
              args.scale if args.scale is not None else 1024.0)]
    if not custom:
        cases.append((2.45e-6, 2.0**15))
    for n, (g, s) in enumerate(cases):
        print(f"({'ab'[n]}) gradient g = {g:g}, loss scale S = {s:g}, format {args.format}")
        print(format_steps(scaling_example(g, s, args.format)))
        if abs(g) > 2.0**-150:  # at or below, g is already 0 in float32, where the gradient starts
            print(_scale_hint(g, args.format))
        elif g != 0:
            print("  g is 0 in float32 already (below half of 2^-149): no loss scale brings it back")
        print()
    lr, g = 1e-4, 2.45e-6
    print(f"(c) the vanishing update: w = 1.0, lr x g = {lr:g} x {g:g} = {lr * g:g}")
    print(format_steps(vanishing_update(1.0, lr * g)))
    print("  It vanishes in float32 as well: a float32 master weight keeps this update only for |w| < 2^-7.")
    print("  Smallest update to w = 1.0 that survives (strictly more than half an ulp):")
    for name in ("float16", "bfloat16", "float32"):
        h = smallest_surviving_update(1.0, name)
        print(f"    {name:<9} just above 2^{int(round(math.log2(h)))} = {h:.6g}")
    return 0


def _scale_hint(g: float, fmt: str) -> str:
    """Which power-of-two scales make g a normal number of fmt: too small AND too large."""
    from ..examples import normal_scale_range

    lo, hi = normal_scale_range(g, fmt)
    if hi < 0:
        return (f"  no scale >= 1 helps: g overflows {fmt} already at S = 1; only S = 2^{lo} .. 2^{hi} "
                f"make it a NORMAL {fmt}")
    k = max(lo, 0)
    return (f"  smallest power-of-two scale that makes g a NORMAL {fmt}: 2^{k}{f' = {2.0**k:g}' if k < 1024 else ''} "
            f"(up to 2^{hi}; beyond, S*g overflows)")


def _backend_arg(name: str) -> str:
    from ..backend import BACKENDS, available

    if name not in BACKENDS:
        raise argparse.ArgumentTypeError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")
    if name not in available():
        raise argparse.ArgumentTypeError(f"backend {name!r} is not available here (it needs CuPy and a CUDA GPU); "
                                         f"available: {', '.join(available())}")
    return name


def _run_json(r) -> dict:
    """One run as strict JSON, steps from 0 as in the table and the figure: NaN / inf (a diverged
    run) become null, and ``null_values`` says which entries were what (``{"final_loss": "nan",
    "losses": "3 of 3 values non-finite (nan)"}``)."""
    from .jsonout import finite

    # "r2" and "accuracy" (null where the task has none) keep the places they had before the
    # task's numbers moved into RunResult.metrics; "metrics" holds all of them
    nf = r.nonfinite
    raw = {"final_loss": r.final_loss, "r2": r.metrics.get("r2"), "steps_skipped": r.steps_skipped,
           "final_scale": r.final_scale, "act_grad_flushed": r.act_grad_flushed,
           "weight_grad_flushed": r.weight_grad_flushed, "stalled": r.stalled, "failure": r.failure,
           "died_at_step": r.died_at, "losses": r.losses, "scales": r.scales, "skipped": r.skipped,
           "seconds": r.seconds, "fp8": r.fp8, "accuracy": r.metrics.get("accuracy"),
           "skipped_share": r.steps_skipped / max(len(r.skipped), 1),
           "first_nonfinite": None if nf is None else {"step": nf.step, "op": nf.op, "where": nf.where,
                                                       "direction": nf.direction, "kind": nf.kind, "text": str(nf)},
           "metrics": r.metrics}
    notes: dict = {}
    out = finite(raw, notes)
    if notes:
        out["null_values"] = notes
    return out


def _figure_path(text: str | None, default: str):
    """Where ``--figure`` writes, checked before any training: a directory gets compare_loss.png
    inside it, a name without a suffix gets .png; a suffix matplotlib cannot write, or a place
    that cannot be written (a read-only folder), is an error now, not after the runs."""
    import errno
    import os
    import tempfile
    from pathlib import Path

    if text == "none":
        return None
    given, text = text is not None, text or default
    path = Path(text)
    if path.is_dir() or text.endswith(("/", "\\")):
        path = path / "compare_loss.png"
    elif not path.suffix:
        path = path.with_suffix(".png")
    from matplotlib.figure import Figure

    kinds = Figure().canvas.get_supported_filetypes()
    if path.suffix[1:].lower() not in kinds:
        raise ValueError(f"--figure {text}: matplotlib cannot write {path.suffix!r} files; use one of "
                         f"{', '.join('.' + k for k in sorted(kinds))}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".fpsim-", suffix=".tmp"):
            pass  # a file can be made there (and is gone again): the figure will be
        if path.exists() and not os.access(path, os.W_OK):
            raise PermissionError(errno.EACCES, "the file is read-only")
    except OSError as e:
        hint = "pass --figure PATH somewhere writable" if given else "pass --figure PATH somewhere writable, or --figure none"
        raise ValueError(f"--figure {text}: cannot write there ({e.strerror or e}); {hint}") from None
    return path


def _save_figure(fig, path) -> None:
    """Write ``fig`` to a temporary file beside ``path`` (the same suffix: matplotlib's format) and
    move it into place: a write that fails (a full disk, a file-size limit, a folder gone) leaves
    neither a half-written figure nor the temporary, and says it was the figure, in one line."""
    import os

    tmp = path.with_name(f".{path.stem}.fpsim-tmp{path.suffix}")
    try:
        fig.savefig(tmp, bbox_inches="tight")
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise OSError(f"--figure {path}: the figure could not be written ({e.strerror or e}); "
                      "the results above are complete") from None
    except BaseException:  # a signal while writing: no temporary left behind
        tmp.unlink(missing_ok=True)
        raise


def _compare_figure(by_seed, seeds, task, steps, path) -> None:
    from .compareplot import compare_figure

    seed_text = f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"
    title = (f"fpsim compare: {task.title()}, {steps} steps, {seed_text}"
             + (" - mean and min-max over the seeds" if len(seeds) > 1 else ""))
    drawn = compare_figure(by_seed if len(seeds) > 1 else by_seed[seeds[0]], title=title)
    import matplotlib.pyplot as plt

    try:
        _save_figure(drawn.figure, path)
    finally:
        plt.close(drawn.figure)
    deaths = "".join(f"; X: {d.recipe} died at step {d.step}" + (f" (seed {d.seed})" if len(seeds) > 1 else "")
                     for d in drawn.deaths)
    print(f"\nfigure (loss, loss / {drawn.baseline or 'nothing'}, {', '.join(drawn.panels[2:]) or 'no more panels'}"
          f"{deaths}): {path}", file=sys.stderr)


def _print_stopped(e, args, recipes) -> None:
    """What a stopped sweep finished (its table; ``--json``: one object, ``stopped``, the finished
    ``runs`` as a whole run prints them and ``not_finished``), then one line: what stopped it, what
    was lost."""
    from ..experiments import format_seed_table, format_table
    from .jsonout import dumps

    finished = {s: r for s, r in e.results.items() if r}
    baseline = recipes[0] if "fp32" not in recipes else "fp32"
    if args.json:  # the finished runs' numbers are kept, as without --json
        runs = {str(s): {n: _run_json(r) for n, r in res.items()} for s, res in finished.items()}
        if args.seeds is None:
            runs = next(iter(runs.values()), {})
        print(dumps({"stopped": e.reason, "runs": runs, "not_finished": [s.label for s in e.lost]}, indent=1))
        sys.stdout.flush()
    elif finished:
        if args.seeds is None:
            print(format_table(next(iter(finished.values())), baseline=baseline))
        elif all(len(r) == len(recipes) for r in finished.values()):
            print(format_seed_table(finished, baseline=baseline))
        else:
            for seed, runs in finished.items():
                print(f"seed {seed}:\n{format_table(runs, baseline=baseline)}\n")
    lost = ", ".join(s.label for s in e.lost)
    print(f"fpsim compare: {e.reason}" + (f"; not finished: {lost}" if lost and e.signum else ""), file=sys.stderr)


def _compare_task(args):
    """The task ``--task`` names (``--provoke-overflow``: the one registered as NAME-overflow), or
    None after printing why not."""
    from ..experiments import TASKS

    name = args.task
    if args.provoke_overflow:
        name = f"{args.task}-overflow"
        if name not in TASKS:
            have = [n[: -len("-overflow")] for n in TASKS if n.endswith("-overflow") and n[: -len("-overflow")] in TASKS]
            print(f"fpsim compare: error: --provoke-overflow needs --task {' or --task '.join(have)} "
                  f"(a task with an overflow setting), got --task {args.task}", file=sys.stderr)
            return None
    return TASKS.get(name)()


def cmd_compare(args) -> int:
    """``fpsim compare``.  SIGINT and SIGTERM stop it cleanly from start to end (as ``fpsim
    reproduce``: :func:`.catalogue.stop_on_signals`, a signal inside a finaliser or numba raised
    once out of it): during the runs the finished runs' table and one line; before the runs, or
    after them while the results or the figure are written, one line saying what was complete;
    the exit status 128 + the signal."""
    from .catalogue import stoppable

    stage = ["before any run finished"]  # what a signal stops, as _compare gets on
    return stoppable("compare", lambda a: _compare(a, stage), args, stage)


def _compare(args, stage: list) -> int:
    from ..experiments import compare_seeds, format_seed_table, format_table
    from .jsonout import dumps

    task = _compare_task(args)
    if task is None:
        return 2
    steps = args.steps or task.steps
    recipes = args.recipes or list(task.default_recipes)
    seeds = args.seeds if args.seeds is not None else [args.seed]
    if len(set(seeds)) != len(seeds):
        print(f"fpsim compare: error: --seeds repeats a seed: {' '.join(map(str, seeds))}", file=sys.stderr)
        return 2
    if args.scheduler is not None and args.jobs is not None:
        print(f"fpsim compare: error: --jobs does not apply with --scheduler: the Dask cluster's workers run the runs "
              f"(leave --jobs {args.jobs} out)", file=sys.stderr)
        return 2
    figure = _figure_path(args.figure, f"figures/{task.figure_name}")  # before the runs: a bad path fails now
    print(f"{task.describe_run(steps, args.lr or task.lr)}, seed{'s' if len(seeds) > 1 else ''} "
          f"{' '.join(map(str, seeds))}", file=sys.stderr)
    from ..experiments.executors import SweepStopped

    try:
        # every step measured, whatever the task's default: the figure and --json show them step by step
        by_seed = compare_seeds(recipes, seeds, task, steps=steps, lr=args.lr,
                                progress=False if args.quiet else "fpsim compare", backend=args.backend,
                                jobs=args.jobs or 1, scheduler=args.scheduler, measure_at="all")
    except SweepStopped as e:  # the finished runs, then one line saying what stopped
        _print_stopped(e, args, recipes)
        return 128 + e.signum if e.signum else 1
    except ImportError as e:
        if args.scheduler is None:
            raise
        print(f"fpsim compare: error: --scheduler {args.scheduler}: {e}", file=sys.stderr)
        return 2
    n_runs = len(seeds) * len(recipes)
    stage[0] = f"after all {n_runs} runs, while the results were printed"
    results = by_seed[seeds[0]]
    baseline = recipes[0] if "fp32" not in recipes else "fp32"
    if args.json:
        if args.seeds is None:
            out = {n: _run_json(r) for n, r in results.items()}
        else:
            out = {str(s): {n: _run_json(r) for n, r in res.items()} for s, res in by_seed.items()}
        print(dumps(out, indent=1))
    elif args.seeds is None:
        print(format_table(results, baseline=baseline))
    else:
        print(format_seed_table(by_seed, baseline=baseline))
    if figure is not None:
        sys.stdout.flush()
        stage[0] = f"after all {n_runs} runs, while the figure was written: the results above are complete, no figure"
        try:
            _compare_figure(by_seed, seeds, task, steps, figure)
        except OSError as e:  # the table (or JSON) is out already: say that only the figure is missing
            print(f"fpsim compare: error: {e}", file=sys.stderr)
            return 1
    return 0


def _add_example(sub) -> None:
    sp = sub.add_parser("example", help="the worked loss-scaling and vanishing-update examples, step by step")
    sp.add_argument("--grad", type=_finite_float, help="the gradient to follow (default: 1e-8, then 2.45e-6)")
    sp.add_argument("--scale", type=_positive_float, help="the loss scale S (default: 1024, then 2^15)")
    sp.add_argument("--format", type=_fmt_arg, default="float16", help="the low-precision format (default float16)")
    sp.set_defaults(func=cmd_example)


def _task_help(tasks) -> str:
    """``--task``'s help: each registered task's line and default recipes."""
    return "; ".join(f"{name}: {cls.help_line()} (default recipes {' '.join(cls.default_recipes)})"
                     for name, cls in tasks.items())


def _per_task(tasks, attr: str) -> str:
    """``reference 150, tinygpt 250, ...``: a class-level default of every registered task."""
    return ", ".join(f"{name} {getattr(cls, attr):g}" for name, cls in tasks.items())


def _add_compare(sub, load: bool = True) -> None:
    """``fpsim compare``; its arguments (which read the task and recipe registries, importing the
    experiments) only where ``load`` says: ``fpsim --help`` and ``fpsim formats`` stay light."""
    sp = sub.add_parser("compare", help="train a task under every recipe; one table of what went wrong",
                        description="Train a task (by default the reference task: an autoencoder whose loss is "
                                    "averaged over 2^20 outputs, so its gradients are tiny) under each recipe, from "
                                    "the same weights, and print one table.")
    sp.set_defaults(func=cmd_compare)
    if not load:
        return
    from ..experiments import RECIPES, TASKS

    sp.add_argument("--recipes", nargs="+", type=_recipe_arg, metavar="RECIPE",
                    help=f"recipes to run (default: the task's, see --task); known: {', '.join(RECIPES)}")
    sp.add_argument("--task", choices=TASKS.names(), default="reference", help=_task_help(TASKS))
    sp.add_argument("--provoke-overflow", action="store_true",
                    help="run the task's overflow setting (--task NAME-overflow), e.g. the tiny GPT's naive softmax, "
                         "so float16 overflows in the forward pass (experiments.tinygpt.OVERFLOW)")
    sp.add_argument("--steps", type=_positive_int, help=f"training steps (default: the task's: {_per_task(TASKS, 'steps')})")
    seed = sp.add_mutually_exclusive_group()
    seed.add_argument("--seed", type=_seed_arg, default=0, help="seed of the initial weights (default 0)")
    seed.add_argument("--seeds", type=_seed_arg, nargs="+", metavar="SEED",
                      help="run every recipe once per seed and print, instead of the full table, each "
                           "recipe's final loss divided by fp32's (or the first recipe's, without fp32) "
                           "from the same seed, with the mean and range; --json then gives the runs by "
                           "seed; the figure shows the mean over the seeds with a min-max band")
    sp.add_argument("--lr", type=_positive_float,
                    help=f"learning rate (default: the task's, the peak of a schedule: {_per_task(TASKS, 'lr')})")
    sp.add_argument("--jobs", type=_positive_int, default=None,
                    help="run the recipes and seeds in this many processes (default 1; at most the usable cores); "
                         "the results are the serial run's, bit for bit; not with --scheduler")
    sp.add_argument("--scheduler", default=None, metavar="ADDRESS",
                    help="run them on the Dask cluster whose scheduler is at ADDRESS (tcp://host:8786; "
                         "pip install 'fpsim[cluster]'); the same bits as a serial run")
    sp.add_argument("--backend", type=_backend_arg, default=None, metavar="{numpy,numpy-f32,cupy}",
                    help="array backend (default numpy, or $FPSIM_BACKEND; numpy-f32 holds the values in float32 "
                         "arrays: the same numbers, faster; cupy needs CuPy and a CUDA GPU)")
    sp.add_argument("--figure", default=None,
                    help="where to write the figure: loss, loss / fp32 loss, and flushed gradients, loss scale and "
                         "stalled updates per step; a directory gets compare_loss.png inside it ('none' for no "
                         f"figure; default figures/ and the task's: "
                         f"{', '.join(f'{n} {c.figure_name}' for n, c in TASKS.items())})")
    sp.add_argument("--json", action="store_true", help="print the results as JSON instead of the table")
    sp.add_argument("--quiet", action="store_true", help="no progress bar")


# The commands with a package of their own (``add_arguments(parser)``, ``main(args)``), imported
# only when that command runs: ``fpsim --help`` and ``fpsim formats`` import none of them.
TOOLS = (
    ("audit", "audit", "which formats and loss scales keep the gradients in a .npz/.safetensors/.pt file", None),
    ("bench", "bench", "how fast the emulation runs, as ratios against numpy, BLAS and PyTorch",
     "Time rounding, matmul, a training step and the monitor hook, each against a peer measured in the same "
     "run; print a table with the targets."),
    ("figures", "figures", "regenerate every figure in figures/ from code (fixed seeds)", None),
    ("gpu-check", "gpu_check", "compare the cupy backend with numpy: every op, the reference task, PyTorch",
     "Run every op and the reference task on numpy and on the cupy backend from the same inputs and weights "
     "and report how far they agree (bit-identical where they must be), with step times.  Without a GPU it "
     "says so and exits 0."),
    ("reproduce", "reproduce", "reproduce a published numerical finding in miniature (--list names them)", None),
    ("bits", "samebits", "fingerprints of a fixed set of runs; --configs: the same under every BLAS kernel and SIMD "
     "path this CPU has", None),
    ("labs", "labs_html", "list the lab notebooks; --copy DIR writes a fresh set; --html DIR runs them and writes "
     "each with its outputs as HTML",
     "List the lab notebooks this fpsim ships; --copy DIR writes a fresh set into DIR (then: jupyter lab DIR); "
     "--html DIR runs them (all, or --lab N ...) in fresh kernels and writes DIR/NN_name.html for each, outputs, "
     "figures and typeset math included, needing no network, and DIR/index.html linking them."),
)


def _add_tools(sub, load=None) -> None:
    """The :data:`TOOLS` commands; the arguments of those in ``load`` (None: all) - each import
    costs its package."""
    import importlib

    for command, module, help_, description in TOOLS:
        sp = sub.add_parser(command, help=help_, description=description)
        if load is None or command in load:
            mod = importlib.import_module(f"{__package__}.{module}")
            mod.add_arguments(sp)
            sp.set_defaults(func=mod.main)


def build_parser(command: str | None = "") -> argparse.ArgumentParser:
    """The ``fpsim`` parser.  ``command``: the one subcommand whose module is imported for its
    arguments ("" none of the :data:`TOOLS`, None every one)."""
    p = argparse.ArgumentParser(prog="fpsim", description="See, number by number, what low precision does to training.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sp = sub.add_parser("formats", help="table of every format's bits and limits")
    sp.add_argument("--all", action="store_true",
                    help="also ocp_int8 and every IEEE P3109 format (k = 3..8 bits, every precision)")
    sp.set_defaults(func=cmd_formats)
    _add_example(sub)
    _add_compare(sub, load=command is None or command == "compare")
    _add_tools(sub, None if command is None else (command,))
    for parser in (p, *sub.choices.values()):
        # argparse takes "-1e-8" for an option (its pattern knows no exponent): let it be a number
        parser._negative_number_matcher = _NEGATIVE_NUMBER
    return p


_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-inf(inity)?$", re.IGNORECASE)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # the top-level parser takes no option but --help: the first other word names the command
    parser = build_parser(next((a for a in argv if not a.startswith("-")), ""))
    args = parser.parse_args(argv)
    if sys.stdout is None:  # started with stdout closed (`fpsim formats >&-`): every line would be lost
        if sys.stderr is not None:
            print(f"fpsim {args.command or ''}: error: standard output is closed; nothing would be seen",
                  file=sys.stderr)
        return 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    keep_freed_memory()  # glibc: freed arrays kept for the next step instead of fresh pages (tools/allocator.py)
    try:
        if args.command in ("formats", "example"):  # instant, and light: Python's own Ctrl-C is enough
            return args.func(args)
        from .catalogue import stoppable  # SIGINT / SIGTERM a command does not report itself: one line

        return stoppable(args.command, args.func, args)
    except BrokenPipeError:  # `fpsim example | head`: the reader left; not an error of ours
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (ValueError, TypeError, OSError) as e:
        print(f"fpsim {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
