"""One bundle loaded and called from 8 threads and from 4 processes at once: right numbers, no
errors (docs/reliability.md)."""

from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import juliabridge
from tests.bundle_factory import dense_bn_arrays, dense_bn_reference, make_dense_bn

THREADS = 8
PROCESSES = 4
CALLS = 5


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_dense_bn(tmp_path_factory.mktemp("concurrency") / "dense_bn.bundle")


def _inputs(k: int) -> np.ndarray:
    """A different input per worker and call, at the traced batch size."""
    return np.random.default_rng(k).standard_normal((5, 2)).astype(np.float32)


def _reference(x: np.ndarray) -> np.ndarray:
    return dense_bn_reference([x, *dense_bn_arrays()[1:]])


def _load_and_call(path: str, worker: int, barrier: Any) -> float:
    """Load the bundle, wait for everyone, call it CALLS times; the largest error seen."""
    barrier.wait(timeout=120)
    model = juliabridge.import_lux(path, backend="xla")
    worst = 0.0
    for c in range(CALLS):
        x = _inputs(100 * worker + c)
        y = np.asarray(model(x))
        assert y.shape == (x.shape[0], 3)
        worst = max(worst, float(np.max(np.abs(y - _reference(x)))))
    return worst


def test_load_and_call_from_8_threads_at_once(bundle: Path) -> None:
    barrier = threading.Barrier(THREADS)
    with ThreadPoolExecutor(THREADS) as pool:
        futures = [pool.submit(_load_and_call, str(bundle), w, barrier) for w in range(THREADS)]
        errors = [f.result(timeout=300) for f in futures]
    assert max(errors) < 1e-5, errors


def test_one_model_called_from_8_threads_at_once(bundle: Path) -> None:
    model = juliabridge.import_lux(bundle, backend="xla")
    barrier = threading.Barrier(THREADS)

    def call(worker: int) -> float:
        barrier.wait(timeout=60)
        worst = 0.0
        for c in range(CALLS):
            x = _inputs(1000 + 100 * worker + c)
            y = np.asarray(model(x))
            worst = max(worst, float(np.max(np.abs(y - _reference(x)))))
        return worst

    with ThreadPoolExecutor(THREADS) as pool:
        errors = list(pool.map(call, range(THREADS), timeout=300))
    assert max(errors) < 1e-5, errors


def _process_main(path: str, worker: int, barrier: Any, results: Any) -> None:
    try:
        results.put((worker, "ok", _load_and_call(path, worker, barrier)))
    except BaseException as e:  # reported to the parent, which fails the test
        results.put((worker, "error", f"{type(e).__name__}: {e}"))


def test_load_and_call_from_4_processes_at_once(bundle: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_process_main, args=(str(bundle), w, barrier, results))
        for w in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    try:
        got = [results.get(timeout=300) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    assert [p.exitcode for p in procs] == [0] * PROCESSES
    failures = [r for r in got if r[1] != "ok"]
    assert not failures, failures
    assert max(r[2] for r in got) < 1e-5, got
