"""Every engine mode is context-local (``contextvars``): two threads in two modes at the same time each
get their own bits.  Each case runs two threads held together by barriers, so one is inside its mode
while the other computes; the expected values are written from the formats, not from fpsim:
bfloat16 ``1 + 2**-10`` is 1.0 to nearest and 1.0078125 (1 + 2**-7) toward +inf; an e4m3 dot product
96 + 2048 * 2**-8 = 104 exactly, while Hopper's truncating fp8 accumulator drops every 2**-8 term
beside 96 and keeps 96.  A plain ``threading.Thread`` starts from the defaults (an empty context, as
PyTorch's thread-local grad mode); ``contextvars.copy_context().run`` carries the caller's modes."""

import contextvars
import threading

import numpy as np
import pytest

import fpsim
from fpsim import ops, state
from fpsim import tensorcore as tc

TIMEOUT = 30  # seconds a barrier waits before the test fails instead of hanging


def _bf16_sum():
    """bfloat16 1 + 2**-10, computed in float32 and rounded once by the engine."""
    a, b = fpsim.tensor(np.float32(1.0), "bf16"), fpsim.tensor(np.float32(2.0**-10), "bf16")
    return float(np.float32((a + b).numpy()))


def _e4m3_dot():
    """[96, 2**-8 x 2048] . ones in e4m3: exactly 104; 96 on Hopper's 13-bit truncating accumulator."""
    x = np.array([[96.0] + [2.0**-8] * 2048], np.float32)
    a, b = fpsim.tensor(x, "e4m3"), fpsim.tensor(np.ones((2049, 1), np.float32), "e4m3")
    return float(np.float32(ops.matmul(a, b).numpy()[0, 0]))


def _side_by_side(mode, compute):
    """(value inside ``mode``, value in a second thread meanwhile, value outside afterwards): thread A
    enters ``mode`` and computes; thread B computes while A is still inside (the barriers hold A there)."""
    entered, computed = threading.Barrier(2, timeout=TIMEOUT), threading.Barrier(2, timeout=TIMEOUT)
    got, errors = {}, []

    def inside():
        try:
            with mode():
                entered.wait()
                got["inside"] = compute()
                computed.wait()
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            errors.append(e)
            entered.abort()
            computed.abort()

    def beside():
        try:
            entered.wait()
            got["beside"] = compute()
            computed.wait()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            entered.abort()
            computed.abort()

    threads = [threading.Thread(target=inside), threading.Thread(target=beside)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    if errors:
        raise errors[0]
    return got["inside"], got["beside"], compute()


def test_rounding_mode_is_per_thread():
    inside, beside, after = _side_by_side(lambda: fpsim.rounding_mode("toward_positive"), _bf16_sum)
    assert (inside, beside, after) == (1.0078125, 1.0, 1.0)


def test_tensor_core_emulation_is_per_thread():
    inside, beside, after = _side_by_side(lambda: tc.emulate("hopper"), _e4m3_dot)
    assert (inside, beside, after) == (96.0, 104.0, 104.0)


def test_grad_mode_is_per_thread():
    def records():
        w = fpsim.tensor(np.ones(3, np.float32), requires_grad=True)
        return (w * 2.0).requires_grad

    assert _side_by_side(fpsim.no_grad, records) == (False, True, True)


def test_autocast_is_per_thread():
    def fmt():
        a = fpsim.tensor(np.ones((2, 2), np.float32))
        return ops.matmul(a, a).fmt.name

    assert _side_by_side(lambda: fpsim.autocast("bfloat16"), fmt) == ("bfloat16", "float32", "float32")


def test_module_scope_is_per_thread():
    assert _side_by_side(lambda: state.scope("net.0"), state.current_scope) == ("net.0", "", "")


def test_seeded_generator_is_per_thread():
    """Inside ``seeded(7)`` stochastic rounding draws from a generator seeded with 7; another thread
    meanwhile draws from the process's own generator (the one ``manual_seed`` resets)."""
    process_rng = state.default_rng()
    inside, beside, after = _side_by_side(lambda: state.seeded(7), state.default_rng)
    assert beside is process_rng and after is process_rng and inside is not process_rng
    assert inside.bit_generator.seed_seq.entropy == 7


def test_monitor_counts_only_its_own_thread():
    """A monitor is a hook: it hears the roundings of the thread (context) that started it, not those a
    second thread computes meanwhile."""
    def count_in(m):
        def one():
            with m:
                entered.wait()
                _bf16_sum()
                computed.wait()
        return one

    entered, computed = threading.Barrier(2, timeout=TIMEOUT), threading.Barrier(2, timeout=TIMEOUT)
    mine, other = fpsim.monitor(), fpsim.monitor()

    def beside():
        with other:
            entered.wait()
            for _ in range(3):
                _bf16_sum()
            computed.wait()

    threads = [threading.Thread(target=count_in(mine)), threading.Thread(target=beside)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    n_mine = sum(c[0] for c in mine.counts.values())
    n_other = sum(c[0] for c in other.counts.values())
    with fpsim.monitor() as alone:
        _bf16_sum()
    n_one = sum(c[0] for c in alone.counts.values())
    assert n_one > 0 and n_mine == n_one and n_other == 3 * n_one


def test_a_new_thread_starts_from_the_defaults_and_copy_context_carries_the_modes():
    seen = {}

    def look(key):
        seen[key] = (_bf16_sum(), state.is_grad_enabled(), state.tensor_core(), state.autocast_format())

    with fpsim.rounding_mode("toward_positive"), fpsim.no_grad(), tc.emulate("hopper"), fpsim.autocast("float16"):
        t = threading.Thread(target=look, args=("plain",))
        t.start()
        t.join(TIMEOUT)
        ctx = contextvars.copy_context()
        t = threading.Thread(target=ctx.run, args=(look, "copied"))
        t.start()
        t.join(TIMEOUT)
    assert seen["plain"] == (1.0, True, None, None)
    value, grad, core, cast_to = seen["copied"]
    assert (value, grad, core[0], cast_to.name) == (1.0078125, False, "hopper", "float16")


def test_a_rounding_mode_object_can_be_entered_again_and_nested():
    m = fpsim.rounding_mode("toward_positive")
    with m:
        assert _bf16_sum() == 1.0078125
    assert _bf16_sum() == 1.0 and state.engine_rounding() is None
    with m:
        with m:
            assert state.engine_rounding().mode == "toward_positive"
        assert _bf16_sum() == 1.0078125
    assert state.engine_rounding() is None


def test_rounding_mode_names_are_case_insensitive_like_format_names():
    with fpsim.rounding_mode("TOWARD_POSITIVE"):
        assert state.engine_rounding().mode == "toward_positive" and _bf16_sum() == 1.0078125
    with fpsim.rounding_mode("NEAREST"):
        assert _bf16_sum() == 1.0
    with pytest.raises(ValueError, match="toward_zero"):
        fpsim.rounding_mode("upward")


def test_blas_pinning_from_two_threads_interleaved():
    """pinned_blas is one process-wide count: thread A enters, thread B enters, A leaves, B leaves -
    B's exit is the last one and hands back the count A found (today's exit read a count B never saved)."""
    steps = [threading.Event() for _ in range(3)]
    errors = []

    def a():
        try:
            with state.pinned_blas():
                steps[0].set()
                steps[1].wait(TIMEOUT)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        steps[2].set()

    def b():
        try:
            steps[0].wait(TIMEOUT)
            with state.pinned_blas():
                steps[1].set()
                steps[2].wait(TIMEOUT)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert errors == []
    with state.pinned_blas():  # balanced again: a fresh pin in this thread saves and restores
        pass


# ---------------------------------------------------------------------------------------- Dask

_DASK_BARRIERS: dict = {}  # module-level, found by name from the worker threads of an in-process cluster


def _dask_task(key, mode):
    """One Dask task: in ``mode`` (or none), meet the other task, compute, meet again."""
    entered, computed = _DASK_BARRIERS[key]
    cm = fpsim.rounding_mode(mode) if mode else state.seeded(0)  # seeded: a mode that touches no rounding
    with cm:
        entered.wait()
        value = _bf16_sum()
        computed.wait()
    return value


def test_two_dask_worker_threads_in_two_modes():
    distributed = pytest.importorskip("distributed")
    key = "rounding"
    _DASK_BARRIERS[key] = (threading.Barrier(2, timeout=TIMEOUT), threading.Barrier(2, timeout=TIMEOUT))
    try:
        with distributed.LocalCluster(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None) \
                as cluster, distributed.Client(cluster) as client:
            up = client.submit(_dask_task, key, "toward_positive", pure=False)
            near = client.submit(_dask_task, key, None, pure=False)
            assert (up.result(TIMEOUT), near.result(TIMEOUT)) == (1.0078125, 1.0)
    finally:
        del _DASK_BARRIERS[key]
