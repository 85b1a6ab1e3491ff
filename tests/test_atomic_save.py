"""Saving is atomic: a save_params or write_bundle killed midway (SIGKILL) leaves the previous
file or bundle intact under its name, never a partial one. The writer's hidden temporary
(``.NAME.jbtmp~HOST~PID~RANDOM``) may survive the kill; juliabridge never reads it, and the
next save to the same target removes it (docs/reliability.md)."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import juliabridge
from juliabridge.bundle.files import atomic
from juliabridge.bundle.files.checksum import sha256_file
from juliabridge.errors import SaveError
from tests.bundle_factory import dense_bn_arrays, make_dense_bn

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(os.name != "posix", reason="SIGKILL and renames: POSIX only")


def _temporaries(target: Path) -> list[Path]:
    return sorted(target.parent.glob(f".{target.name}{atomic.TMP_MARK}*"))


def _kill_while_writing(code: str, target: Path, min_bytes: int = 1 << 20) -> None:
    """Run `code` in a child and SIGKILL it once its temporary for `target` holds data."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the writer finished before it could be killed"
            tmps = _temporaries(target)
            size = 0
            for t in tmps:
                files = [t] if t.is_file() else list(t.rglob("*"))
                size += sum(f.stat().st_size for f in files if f.is_file())
            if size >= min_bytes:
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.001)
        else:
            pytest.fail("the writer never started writing")
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL


BIG = 64 << 20  # 64 Mi float32 = 256 MiB: long enough to be caught midway


@pytest.mark.parametrize("attempt", range(3))
def test_killed_save_params_leaves_the_previous_file_intact(tmp_path: Path, attempt: int) -> None:
    bundle = make_dense_bn(tmp_path / "dense_bn.bundle")
    model = juliabridge.import_lux(bundle, backend="xla")
    target = tmp_path / "finetuned.h5"
    # The "previous" fine-tuned weights.
    tuned = {k: {n: np.asarray(v) + 1 for n, v in d.items()} for k, d in model.params.items()}
    juliabridge.save_params(tuned, target, state=model.state)
    before = sha256_file(target)
    code = f"""
        import numpy as np, juliabridge
        model = juliabridge.import_lux({str(bundle)!r}, backend="xla")
        params = {{k: dict(v) for k, v in model.params.items()}}
        params["extra"] = {{"big": np.full({BIG}, {attempt + 2}, np.float32)}}
        juliabridge.save_params(params, {str(target)!r}, state=model.state, overwrite=True)
    """
    _kill_while_writing(code, target)
    # Under the final name: exactly the previous file, still loadable.
    assert sha256_file(target) == before
    params, _state = juliabridge.load_params(target)
    np.testing.assert_array_equal(params["layer_1"]["weight"], tuned["layer_1"]["weight"])
    assert "extra" not in params
    # The killed writer's temporary is the documented hidden name, marked with its PID ...
    leftovers = _temporaries(target)
    assert len(leftovers) == 1, leftovers
    assert leftovers[0].name.startswith(f".{target.name}{atomic.TMP_MARK}")
    assert atomic.stale_temporaries(target) == leftovers
    # ... and the next save to the same target removes it.
    juliabridge.save_params(tuned, target, state=model.state, overwrite=True)
    assert _temporaries(target) == []
    assert sha256_file(target) != ""


def test_killed_write_bundle_leaves_the_previous_bundle_intact(tmp_path: Path) -> None:
    target = make_dense_bn(tmp_path / "model.bundle")
    before = {p.name: sha256_file(p) for p in target.iterdir()}
    code = f"""
        import jax, numpy as np
        from juliabridge.bundle.write.description import ArgumentSpec, BundleDescription
        from juliabridge.bundle.write.writer import write_bundle
        w = np.ones({BIG}, np.float32)
        x = np.ones(3, np.float32)
        text = jax.jit(lambda x, w: x * w[:3]).lower(x, w).as_text()
        args = [ArgumentSpec("input", [], x), ArgumentSpec("parameter", ["w"], w)]
        write_bundle({str(target)!r}, BundleDescription(name="big", mlir_text=text,
                     arguments=args, result_paths=[[["output"]]]), overwrite=True)
    """
    _kill_while_writing(code, target)
    assert {p.name: sha256_file(p) for p in target.iterdir()} == before
    model = juliabridge.import_lux(target, backend="xla")
    assert model.manifest.name == "dense_bn"
    np.asarray(model(dense_bn_arrays()[0]))
    leftovers = _temporaries(target)
    assert len(leftovers) == 1 and leftovers[0].is_dir(), leftovers
    make_dense_bn(target, seed=1)  # overwrite=True; removes the dead writer's directory
    assert _temporaries(target) == []
    assert juliabridge.import_lux(target, backend="xla").manifest.name == "dense_bn"


def test_exchange_swaps_two_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Relative paths too (a bundle written as `out/m.bundle`): they start at the working
    directory. Linux has renameat2 (3.15+), on every filesystem CI writes to."""
    monkeypatch.chdir(tmp_path)
    a, b = Path("a"), Path("b")
    a.mkdir()
    b.mkdir()
    (a / "x").write_text("a")
    (b / "x").write_text("b")
    if not sys.platform.startswith("linux"):
        assert atomic.exchange(a, b) is False
        pytest.skip("renameat2(RENAME_EXCHANGE) is Linux's; elsewhere the writer falls back")
    assert atomic.exchange(a, b) is True
    assert (a / "x").read_text() == "b" and (b / "x").read_text() == "a"


def test_temporaries_of_live_writers_are_kept(tmp_path: Path) -> None:
    target = tmp_path / "w.h5"
    mine = atomic.temp_path(target)
    mine.write_bytes(b"in progress")
    other_host = tmp_path / f".w.h5{atomic.TMP_MARK}otherhost~1~abcd"
    other_host.write_bytes(b"?")
    assert atomic.stale_temporaries(target) == []  # our own PID is alive; other hosts unknown
    dead = tmp_path / f".w.h5{atomic.TMP_MARK}{atomic._HOST}~{_dead_pid()}~abcd"
    dead.write_bytes(b"!")
    assert atomic.stale_temporaries(target) == [dead]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_saved_files_have_ordinary_permissions(tmp_path: Path) -> None:
    """Not mkstemp's 0600: a saved weights file or bundle is shared data (umask applies)."""
    old = os.umask(0o022)
    try:
        target = juliabridge.save_params({"w": np.ones(3, np.float32)}, tmp_path / "w.h5")
        bundle = make_dense_bn(tmp_path / "b.bundle")
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert stat.S_IMODE(bundle.stat().st_mode) == 0o755
    assert stat.S_IMODE((bundle / "weights.h5").stat().st_mode) == 0o644


def test_overwrite_only_replaces_bundles(tmp_path: Path) -> None:
    precious = tmp_path / "documents"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    with pytest.raises(SaveError, match="not a bundle"):
        make_dense_bn(precious)
    assert (precious / "thesis.tex").read_text() == "years of work"
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    with pytest.raises(SaveError, match="not a directory"):
        make_dense_bn(a_file)


def test_save_errors_name_the_target(tmp_path: Path) -> None:
    with pytest.raises(SaveError, match="is a directory") as info:
        juliabridge.save_params({"w": np.ones(3, np.float32)}, tmp_path)
    assert isinstance(info.value, OSError) and isinstance(info.value, juliabridge.JuliaBridgeError)


def test_without_renameat2_an_overwrite_moves_the_old_bundle_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where renameat2 is missing (macOS, old kernels), the old bundle is moved aside, the new
    one renamed in, the old one removed; a failed second rename puts the old one back."""
    target = make_dense_bn(tmp_path / "b.bundle", seed=0)
    before = {p.name: sha256_file(p) for p in target.iterdir()}
    monkeypatch.setattr(atomic, "exchange", lambda a, b: False)
    real_replace = os.replace
    renames: list[tuple[str, str]] = []

    def failing(src: object, dst: object) -> None:
        if target in (Path(str(src)), Path(str(dst))):  # not the files inside the new bundle
            renames.append((Path(str(src)).name, Path(str(dst)).name))
            if len(renames) == 2:  # the new bundle's rename in, after the old one's aside
                raise OSError(28, "No space left on device")
        real_replace(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(SaveError, match="any previous bundle there is unchanged"):
        make_dense_bn(target, seed=1)
    assert {p.name: sha256_file(p) for p in target.iterdir()} == before
    assert _temporaries(target) == []
    aside, new = renames[0][1], renames[1][0]
    assert renames == [("b.bundle", aside), (new, "b.bundle"), (aside, "b.bundle")]
    assert aside != new and atomic.TMP_MARK in aside and atomic.TMP_MARK in new
    monkeypatch.setattr(os, "replace", real_replace)
    make_dense_bn(target, seed=1)
    after = {p.name: sha256_file(p) for p in target.iterdir()}
    assert after.keys() == before.keys() and after["weights.h5"] != before["weights.h5"]
    assert _temporaries(target) == []


def test_fsync_dir_flushes_that_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rename is durable only once its directory is flushed: fsync_dir syncs a descriptor of
    the directory itself, and a directory that cannot be opened is skipped, not an error."""
    synced: list[int] = []
    real_fsync = os.fsync

    def record(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", record)
    atomic.fsync_dir(tmp_path)
    assert synced == [tmp_path.stat().st_ino]
    atomic.fsync_dir(tmp_path / "missing")
    assert synced == [tmp_path.stat().st_ino]


def test_an_overwrite_succeeds_when_the_old_bundle_cannot_be_removed(tmp_path: Path) -> None:
    """Once the new bundle is in place the write has succeeded: a file of the replaced bundle
    that cannot be deleted (immutable, chattr +i) leaves a hidden leftover, not an error."""
    import shutil

    target = make_dense_bn(tmp_path / "b.bundle", seed=0)
    stuck = target / "notes.txt"
    stuck.write_text("cannot be deleted")
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(stuck)]).returncode != 0:
        pytest.skip("chattr +i is not available here (needs root and a filesystem with it)")
    try:
        before = sha256_file(target / "weights.h5")
        make_dense_bn(target, seed=1)  # overwrite=True
        assert sha256_file(target / "weights.h5") != before
        assert not (target / "notes.txt").exists()
        (leftover,) = _temporaries(target)
        assert (leftover / "notes.txt").read_text() == "cannot be deleted"
    finally:
        for p in tmp_path.rglob("notes.txt"):
            subprocess.run([chattr, "-i", str(p)], check=False)


def test_a_bundle_in_a_folder_that_cannot_hold_one_is_a_save_error_saying_so(
    tmp_path: Path,
) -> None:
    from juliabridge import SaveError

    (tmp_path / "a-file").write_bytes(b"")
    target = tmp_path / "a-file" / "b.bundle"
    with pytest.raises(SaveError) as e:
        make_dense_bn(target)
    message = str(e.value)  # the OS's reason between the parentheses
    assert message.startswith(f"{target}: cannot create a directory in {target.parent} (")
    assert message.endswith("); check that it is writable")
