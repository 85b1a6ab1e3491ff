"""Child process that turns StableHLO portable artifacts into MLIR text (run by artifact.py).

Deserializing and printing a module recurses once per nesting level in C++, so a hostile
artifact (a few hundred KiB of nested regions) can overflow the stack and kill the process that
reads it. Running it here makes that a typed error in the caller instead. Only jaxlib's MLIR
bindings are imported (not jax, not juliabridge), so the process starts in about 0.15 s.

Protocol, all lengths 8-byte little-endian. stdin: for each artifact, its length then its
bytes. stdout: for each artifact, one status byte (``T``: MLIR text follows, ``E``: an error
message follows), a length, then that many bytes of UTF-8.
"""

from __future__ import annotations

import sys
import threading

#: Largest text sent back: the module limit of juliabridge/stablehlo/module.py.
MAX_TEXT_BYTES = 1 << 30
#: Deep (but legitimate) modules get room; the kernel commits only the pages used.
STACK_BYTES = 512 << 20


def _read_exact(stream, n: int) -> bytes:  # type: ignore[no-untyped-def]
    data = stream.read(n)
    if len(data) != n:
        raise EOFError(f"expected {n} bytes on stdin, got {len(data)}")
    return bytes(data)


def _convert(artifact: bytes) -> tuple[bytes, bytes]:
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    try:
        ctx = ir.Context()
        stablehlo.register_dialect(ctx)
        module = stablehlo.deserialize_portable_artifact(ctx, artifact)
        text = module.operation.get_asm(enable_debug_info=False)
    except Exception as e:  # any failure is reported, the caller falls back to the text
        return b"E", f"{type(e).__name__}: {e}".encode("utf-8", "replace")[:4000]
    data = str(text).encode("utf-8")
    if len(data) > MAX_TEXT_BYTES:
        return b"E", b"the module's text is larger than the 1 GiB module limit"
    return b"T", data


def _serve() -> None:
    src = sys.stdin.buffer
    out = sys.stdout.buffer
    while header := src.read(8):
        if len(header) != 8:
            raise EOFError("truncated length on stdin")
        status, payload = _convert(_read_exact(src, int.from_bytes(header, "little")))
        out.write(status + len(payload).to_bytes(8, "little") + payload)
        out.flush()


def main() -> int:
    """Serve stdin in a thread with a large stack; exit status 0 when every reply was sent."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            _serve()
        except BaseException as e:
            failures.append(e)

    threading.stack_size(STACK_BYTES)
    worker = threading.Thread(target=run, name="juliabridge-artifact")
    worker.start()
    worker.join()
    if failures:
        print(f"{type(failures[0]).__name__}: {failures[0]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
