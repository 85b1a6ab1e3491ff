#!/usr/bin/env python3
"""Mutation smoke for CI: a fixed sample of mutmut's mutants of core files must stay killed.

Runs mutmut (configured in pyproject.toml, see docs/mutation-testing.md) in a scratch copy of
the working tree, on a smaller scope that fits CI's budget:

* the files in SMOKE_FILES, plus those of pyproject's `only_mutate` list that changed since the
  merge base with the main branch (so a change to a mutated module is sampled too), and the
  functions named in SMOKE_FUNCTIONS of larger core modules (left out when --files is given);
* the tests in SMOKE_TESTS, plus TESTS_FOR's tests of each changed module (each mutant runs
  only those that reach its function);
* of the mutants mutmut generates there, a fixed sample: every function's mutants numbered
  1, 1 + stride, 1 + 2 * stride, ... (mutmut numbers a function's mutants in source order, so
  the sample is the same from run to run while the code is).

The score is killed (timeouts count as killed) / sampled, without the mutants listed in
EQUIVALENT. Exit status 1 when it is below --threshold or when mutmut cannot run the clean
tests; the survivors are printed with their diffs.

Usage: python tools/mutation_smoke.py [--threshold 0.9] [--stride 8] [--base main]
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Core modules sampled on every run: small, and quick to test.
SMOKE_FILES = [
    "juliabridge/lux/trees.py",
    "juliabridge/lux/batchsize.py",
    "juliabridge/function.py",
    "juliabridge/dtypes.py",
    "juliabridge/backends/lax/evaluate.py",
    "juliabridge/backends/lax/valtypes.py",
]
#: Core modules too large to sample whole on every run: only these functions' mutants (the
#: refusals and rules a refactor is likeliest to break), so bundle/, stablehlo/ and
#: transforms/ have mutants in every run too.
SMOKE_FUNCTIONS = {
    "juliabridge/stablehlo/sanitize.py": ["_filter_arg_attrs"],
    "juliabridge/transforms/primitives.py": ["_jvp_transpose"],
}
#: Tests that kill the sampled mutants (a subset of pyproject's selection).
SMOKE_TESTS = [
    "tests/test_pinned_batch.py",
    "tests/test_pinned_calls.py",
    "tests/test_pinned_params.py",
    "tests/test_pinned_lax.py",
    "tests/test_pinned_sanitize_report.py",
    "tests/test_pinned_higher_order.py",
]
#: The tests that reach a changed module's mutants, by path prefix (first match wins); a changed
#: module matching none gets pyproject's whole test selection.
TESTS_FOR = {
    "juliabridge/bundle/": ["tests/test_pinned_security.py", "tests/test_bundle_hardening.py"],
    "juliabridge/stablehlo/": ["tests/test_pinned_security.py", "tests/test_module_hardening.py"],
    # not tests/test_transforms.py: its `juliabridge vjp` test runs Enzyme's derivation child,
    # which dies under mutmut (docs/mutation-testing.md), so the clean run would fail
    "juliabridge/transforms/": ["tests/test_pinned_transforms.py"],
    "juliabridge/verification.py": ["tests/test_pinned_verify.py"],
    "juliabridge/lux/params_io.py": ["tests/test_pinned_params.py"],
    "juliabridge/lux/parallel.py": ["tests/test_pinned_parallel.py"],
    "juliabridge/lux/model.py": ["tests/test_pinned_calls.py", "tests/test_pinned_batch.py"],
    "juliabridge/backends/lax/": ["tests/test_pinned_lax.py", "tests/lax/test_framework.py"],
}
#: Mutants no test can kill because they do not change behaviour (docs/mutation-testing.md
#: explains each); they leave the denominator while their mutated line is still the one named.
EQUIVALENT: dict[str, str] = {
    # the one caller passes batched_chunks explicitly (model.py), so the default is never used
    "juliabridge.lux.batchsize.x_call_with_batch__mutmut_1": "batched_chunks: bool = False,",
    # layout is only ever compared with "julia": any other default string reads as "mlir"
    "juliabridge.lux.batchsize.x_batch_size_of__mutmut_1": 'layout: str = "XXmlirXX"',
    "juliabridge.lux.batchsize.x_check_fixed_shapes__mutmut_1": 'layout: str = "XXmlirXX"',
    # import_lux, the one maker of LuxModels, always passes layout
    "juliabridge.lux.model.xǁLuxModelǁ__init____mutmut_1": 'layout: str = "XXmlirXX",',
    # O_NOFOLLOW refuses a symlink before fstat, and fstat of a descriptor never reports one;
    # on Linux every other non-regular file is a directory, FIFO, device or socket, named before
    # (the mutants of the last two branches of kind_of, from the full run of safefile.py)
    "juliabridge.bundle.files.safefile.x_kind_of__mutmut_15": "stat.S_ISLNK(None)",
    "juliabridge.bundle.files.safefile.x_kind_of__mutmut_16": '"XXa symlinkXX"',
    "juliabridge.bundle.files.safefile.x_kind_of__mutmut_17": 'return "a symlink"',
    "juliabridge.bundle.files.safefile.x_kind_of__mutmut_18": '"XXa special fileXX"',
    "juliabridge.bundle.files.safefile.x_kind_of__mutmut_19": '"A SPECIAL FILE"',
    # only where preadv is missing: os.read and a copy into the view read what readv would
    "juliabridge.bundle.files.safefile.x_read_at__mutmut_19": 'hasattr(os, "readv")) and False',
    "juliabridge.bundle.files.safefile.x_read_at__mutmut_25": 'hasattr(None, "readv")',
    "juliabridge.bundle.files.safefile.x_read_at__mutmut_29": '"XXreadvXX"',
    "juliabridge.bundle.files.safefile.x_read_at__mutmut_30": '"READV"',
    # Linux reports ELOOP for every symlink opened with O_NOFOLLOW: this clause is for other
    # platforms (not observable here)
    "juliabridge.bundle.files.safefile.x_open_regular__mutmut_17": "e.errno != errno.EACCES",
    # O_NONBLOCK changes nothing for a regular file on Linux (its reads never return EAGAIN),
    # and anything else was refused just before: clearing it, or not, is not observable
    "juliabridge.bundle.files.safefile.x_open_regular__mutmut_30": 'hasattr(None, "set_blocking")',
    "juliabridge.bundle.files.safefile.x_open_regular__mutmut_34": '"XXset_blockingXX"',
    "juliabridge.bundle.files.safefile.x_open_regular__mutmut_35": '"SET_BLOCKING"',
    "juliabridge.bundle.files.safefile.x_open_regular__mutmut_40": "os.set_blocking(fd, False)",
    # leaf[:n] for n past len(leaf) is leaf itself, already in the set of prefixes
    "juliabridge.bundle.manifest.x__check_consistency__mutmut_113": "range(len(leaf) + 2)",
    # json.loads cannot recurse past the 64 levels the depth check lets through
    "juliabridge.bundle.manifest.x_load_manifest__mutmut_49": "raise ManifestError(None) from e",
    # numpy stores bool as one byte 0/1 already: the uint8 view changes no byte hashed
    "juliabridge.bundle.files.digest.x_canonical_bytes__mutmut_9": 'if mlir_dtype == "i1":',
    # the Python reader's plan already refused every stored type decode would refuse, so
    # decode's message (where this names the dataset) is never built on that route
    "juliabridge.bundle.weights.xǁWeightsReaderǁ_read_fast__mutmut_33": (
        "decode(raw, r.dtype, None)"
    ),
    # forgetting that the whole file was verified only hashes it again, with the same result
    "juliabridge.bundle.weights.xǁWeightsReaderǁ_verify_file_first__mutmut_25": (
        "self._file_verified = None"
    ),
    # ascontiguousarray makes a rank-0 array rank 1, and a C-contiguous array's uint8 view has
    # the same bytes whatever its shape: reshape(None) hashes what reshape(-1) does
    "juliabridge.bundle.weights.x__little_endian_bytes__mutmut_17": "arr.reshape(None)",
    # on a little-endian machine a native array's bytes already are little-endian
    "juliabridge.bundle.weights.x__little_endian_bytes__mutmut_9": "np.little_endian is not False",
    # no default for a target without a call site: None and "" both leave the site out
    "juliabridge.stablehlo.policy.x_check_custom_calls__mutmut_81": "get(bad[0], )",
    # a dialect is the name up to the first dot; the last dot differs only for a name with two
    # dots, and stablehlo/chlo have none: an unknown op of theirs is a parse error before this
    "juliabridge.stablehlo.policy.x_check_ops__mutmut_9": 'op.rsplit(".", 1)[0]',
    # contracts: layouts are checked after tensor_type admitted every operand and result, so
    # each is a ranked tensor and the rank of anything else is never used
    "juliabridge.stablehlo.contracts.x__check_layouts__mutmut_17": (
        "isinstance(t, ir.RankedTensorType) else -2"
    ),
    # MLIR's verifier already refuses every alias this check would (indices out of range or
    # into non-tuples, operand and result of different types): skipping it, or its message
    # (tensor_type refuses tuple operands and results first), changes nothing observable
    "juliabridge.stablehlo.contracts.x__check_aliases__mutmut_1": (
        '"XXoutput_operand_aliasesXX" not in op.attributes'
    ),
    "juliabridge.stablehlo.contracts.x__check_aliases__mutmut_17": (
        '"XXaliases into tuples are not supportedXX"'
    ),
    # a target without a contract is refused by the policy (or admitted unchecked with
    # trust=True, or lifted by the lax backend) before check_custom_call could say so
    "juliabridge.stablehlo.contracts.x_check_custom_call__mutmut_17": (
        '"XXjuliabridge (juliabridge/stablehlo/contracts.py), so its kernel could be handed XX"'
    ),
    # lax attrs: a numpy dtype kind is one character, and "X" is none, so `in "XXiubXX"`
    # tests what `in "iub"` does
    "juliabridge.backends.lax.attrs.x__real__mutmut_25": 'if base.kind in "XXiubXX":',
    "juliabridge.backends.lax.attrs.x__from_literal__mutmut_17": 'if want.kind in "XXiubXX":',
    # np.array(values, dtype) and assigning them one by one convert the same way (bf16/f8 NaN
    # payloads and -0.0 included; complex values are Python complex either way)
    "juliabridge.backends.lax.attrs.x__from_literal__mutmut_25": 'if want.kind != "c":',
    # without the binding's isinstance, _isa casts, which succeeds exactly for the same attributes
    "juliabridge.backends.lax.attrs.x__isa__mutmut_1": "check = None",
    # the numpy buffer of a dense attribute is used only when its dtype and size are the wanted
    # ones (for bf16, f8, i4... numpy gets a 0-d object array); otherwise, as for a 9-byte
    # item, the printed form decodes the same values (MLIR prints a float that would not
    # round-trip in decimal as its bit pattern)
    "juliabridge.backends.lax.attrs.x_dense__mutmut_9": (
        "and want.kind in _BUFFER_KINDS or want.itemsize in (1, 2, 4, 8)"
    ),
    "juliabridge.backends.lax.attrs.x_dense__mutmut_17": "want.itemsize in (1, 2, 4, 9)",
    # MLIR prints a dense hex blob as "0x..." in quotes and any other dense body of a numeric
    # type without a quote at either end: `and` and `or` decide alike
    "juliabridge.backends.lax.attrs.x_dense__mutmut_65": (
        "if body.startswith('\"0x') or body.endswith('\"'):"
    ),
    # stablehlo's call-graph check refuses a top-level op other than func.func at load, before
    # the lax backend builds a Program, so this message is never built
    "juliabridge.backends.lax.program.xǁProgramǁ__init____mutmut_9": "{location_of(None)}",
    # likewise a declaration without a body (stablehlo's call-graph check) and a region of
    # more than one block (its region check) never reach the lax backend's own refusals
    "juliabridge.backends.lax.program.xǁProgramǁfunction__mutmut_17": (
        "if not decl.regions and not decl.regions[0].blocks:"
    ),
    "juliabridge.backends.lax.program.xǁ_FunctionBuilderǁ_block__mutmut_9": "op=owner.name,",
    # the eager impl's lookup of the backend's jitted entry prints nothing natively (it builds
    # a Compiled; Enzyme's derivation child keeps its own stderr), so capturing it changes nothing
    "juliabridge.transforms.primitives.x__impl__mutmut_9": "lambda: get_fn(target, True), )()",
    # _h5core (docs/mutation-testing.md, round 2): /dev/fd is /proc/self/fd on Linux; the path
    # is never read; closefd matters only without either descriptor directory
    "juliabridge.bundle.weights._h5core.x__fd_path__mutmut_1": '"XX/proc/self/fd/{}XX"',
    "juliabridge.bundle.weights._h5core.xǁReaderǁ__init____mutmut_1": "self.path = None",
    "juliabridge.bundle.weights._h5core.xǁReaderǁ__init____mutmut_17": 'os.fdopen(fd, "rb", )',
    # an unknown kind is reported as corrupt, with the corrupt advice
    "juliabridge.bundle.weights._h5core.xǁReaderǁprepare__mutmut_17": 'raise Problem("CORRUPT"',
    "juliabridge.bundle.weights._h5core.xǁReaderǁ_check_inflation__mutmut_49": (
        '"CORRUPT", f"cannot read'
    ),
    "juliabridge.bundle.weights._h5core.xǁReaderǁ_check_storage__mutmut_33": (
        'raise Problem("XXcorruptXX"'
    ),
    # get_offset of a chunked or compact dataset is None and unused; compact data lives in the
    # header (never short); no fifth layout exists (virtual is refused before)
    "juliabridge.bundle.weights._h5core.xǁReaderǁ_check_storage__mutmut_17": (
        "(layout == h5d.CONTIGUOUS) or True"
    ),
    "juliabridge.bundle.weights._h5core.xǁReaderǁ_check_storage__mutmut_81": (
        'raise Problem("XXlimitXX", unwritten)'
    ),
    "juliabridge.bundle.weights._h5core.xǁReaderǁ_check_storage__mutmut_129": (
        "raise Problem(None, f"
    ),
    # break -> return once the stream ended: nothing follows the loop
    "juliabridge.bundle.weights._h5core.x__bounded_inflate__mutmut_25": "return",
}

KILLED = {1, 3, 24, -24, 36, 152, 255}  # mutmut: test failure, pytest error, timeouts
SURVIVED = {0, 5, 33, 35}  # survived, no tests, no tests, suspicious


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return out.stdout.strip() if out.returncode == 0 else ""


def changed_files(base: str, mutated: list[str]) -> list[str]:
    """Files of `mutated` that differ (committed or not) from the merge base with `base`."""
    merge_base = _git("merge-base", "HEAD", base)
    if not merge_base:
        return []
    names = set(_git("diff", "--name-only", merge_base).splitlines())
    return [f for f in mutated if f in names]


def tests_for(changed: list[str], selection: list[str]) -> list[str]:
    """SMOKE_TESTS plus the tests that reach the mutants of the `changed` modules."""
    tests = list(SMOKE_TESTS)
    for f in changed:
        extra = next((t for prefix, t in TESTS_FOR.items() if f.startswith(prefix)), selection)
        tests += [t for t in extra if t not in tests]
    return tests


def scratch_copy(dest: Path) -> None:
    """The working tree's tracked and untracked (not ignored) files, as they are now."""
    listing = _git("ls-files", "--cached", "--others", "--exclude-standard", "-z")
    for rel in filter(None, listing.split("\0")):
        src = ROOT / rel
        if not src.is_file():
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)


def smoke_config(pyproject: Path, files: list[str], tests: list[str]) -> None:
    """Rewrite [tool.mutmut]'s scope in the scratch copy's pyproject.toml."""
    text = pyproject.read_text()
    for key, values in (("only_mutate", files), ("pytest_add_cli_args_test_selection", tests)):
        block = re.compile(rf"^{key} = \[.*?^\]", re.S | re.M)
        new = f"{key} = {json.dumps(values)}"
        text, n = block.subn(new, text)
        if n != 1:
            raise SystemExit(f"mutation_smoke: no multi-line {key} list in [tool.mutmut]")
    pyproject.write_text(text)


def module_name(path: str) -> str:
    """``juliabridge/lux/trees.py`` -> ``juliabridge.lux.trees`` (mutmut's prefix)."""
    return path.removesuffix(".py").replace("/", ".")


def patterns(files: list[str], functions: dict[str, list[str]], stride: int) -> list[str]:
    """mutmut name patterns: every function's sampled mutants in `files`, and in each module
    of `functions` (not also in `files`) those of the functions named."""
    numbers = range(1, 400, stride)
    out = [f"{module_name(f)}.*__mutmut_{k}" for f in files for k in numbers]
    for f, names in functions.items():
        if f not in files:
            out += [f"{module_name(f)}.x_{n}__mutmut_{k}" for n in names for k in numbers]
    return out


def mutmut(work: Path, children: int, *names: str) -> int:
    env = dict(os.environ)
    env.setdefault("JULIABRIDGE_HDF5_WORKER", "0")  # bundle/ is not mutated; skip the subprocess
    env.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
    cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(children)]
    proc = subprocess.run([*cmd, *names], cwd=work, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
    return proc.returncode


def results(work: Path) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for meta in (work / "mutants").rglob("*.py.meta"):
        out.update(json.loads(meta.read_text())["exit_code_by_key"])
    return out


def show(work: Path, name: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "mutmut", "show", name],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threshold", type=float, default=0.9)
    parser.add_argument("--stride", type=int, default=8)
    parser.add_argument("--base", default="main")
    parser.add_argument("--keep", action="store_true", help="keep the scratch copy")
    parser.add_argument("--files", nargs="*", help="mutate these files instead of SMOKE_FILES")
    parser.add_argument("--tests", nargs="*", help="run these tests instead of SMOKE_TESTS")
    parser.add_argument("--children", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    start = time.monotonic()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    changed = changed_files(args.base, list(config["only_mutate"]))
    files = sorted(set(args.files or SMOKE_FILES) | set(changed))
    functions = {} if args.files else SMOKE_FUNCTIONS
    tests = args.tests or tests_for(changed, list(config["pytest_add_cli_args_test_selection"]))
    work = Path(tempfile.mkdtemp(prefix="jb-mutation-smoke-"))
    try:
        scratch_copy(work)
        smoke_config(work / "pyproject.toml", sorted(set(files) | set(functions)), tests)
        wanted = patterns(files, functions, args.stride)
        if mutmut(work, args.children, *wanted) != 0:
            print("mutation smoke: mutmut could not run (the clean tests must pass)")
            return 1
        sampled = {
            n: c for n, c in results(work).items() if any(fnmatch.fnmatchcase(n, p) for p in wanted)
        }
        equivalent = set()
        for name, line in EQUIVALENT.items():
            if name in sampled and line in show(work, name):
                equivalent.add(name)
        counted = {n: c for n, c in sampled.items() if n not in equivalent}
        killed = [n for n, c in counted.items() if c in KILLED]
        unchecked = [n for n, c in counted.items() if c is None]
        survivors = sorted(n for n in counted if n not in killed and n not in unchecked)
        total = len(killed) + len(survivors)
        score = len(killed) / total if total else 1.0
        by_file: dict[str, list[int]] = {}
        for n, c in counted.items():
            if c is None:
                continue
            mod = n.rsplit(".", 1)[0]
            by_file.setdefault(mod, [0, 0])
            by_file[mod][0] += c in KILLED
            by_file[mod][1] += 1
        for mod, (k, t) in sorted(by_file.items()):
            print(f"  {mod:45s} {k:4d}/{t:<4d} killed")
        for n in survivors:
            print(show(work, n).rstrip() or n)
        if args.keep:
            (work / "smoke-results.json").write_text(json.dumps(counted, indent=1))
        print(
            f"mutation smoke: {len(killed)}/{total} sampled mutants killed ({score:.1%}; "
            f"threshold {args.threshold:.0%}; {len(equivalent)} equivalent left out; files: "
            f"{', '.join(files + [f for f in functions if f not in files])}) in "
            f"{time.monotonic() - start:.0f} s"
        )
        if unchecked:
            print(f"mutation smoke: {len(unchecked)} sampled mutants were not run")
            return 1
        return 0 if score >= args.threshold else 1
    finally:
        if args.keep:
            print(f"scratch copy kept at {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
