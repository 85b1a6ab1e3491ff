"""Progress bars for long operations, on stderr, only where someone watches.

A bar is shown when stderr is a terminal and hidden otherwise (logs, pipes, CI, pytest), so
output captured by a program never holds control sequences. ``JULIABRIDGE_PROGRESS=0`` hides
every bar, ``JULIABRIDGE_PROGRESS=1`` shows them even when stderr is not a terminal; a
function's own ``progress=`` argument, where it has one, wins over both. Bars are transient:
they vanish when the operation ends. rich draws them (a juliabridge dependency already).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO, TypeVar

ENV = "JULIABRIDGE_PROGRESS"
#: Loads smaller than this finish before a bar could be read, so they show none.
MIN_BYTES = 64 << 20

T = TypeVar("T")


def enabled(explicit: bool | None = None, stream: TextIO | None = None) -> bool:
    """Whether to show a bar: `explicit` if given, else ``JULIABRIDGE_PROGRESS``, else a TTY.

    Args:
        explicit: the caller's choice (True/False), or None to decide from the environment.
        stream: where the bar would be drawn (default ``sys.stderr``).

    Returns:
        True when a bar should be drawn.
    """
    if explicit is not None:
        return explicit
    setting = os.environ.get(ENV, "").strip().lower()
    if setting in ("0", "false", "no", "off"):
        return False
    if setting in ("1", "true", "yes", "on"):
        return True
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _progress(*, bar: bool, stream: TextIO | None) -> Any:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    # force_terminal: we only get here when a bar was asked for, terminal or not.
    console = Console(file=sys.stderr if stream is None else stream, force_terminal=True)
    columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
    if bar:
        columns += [BarColumn(), DownloadColumn()]
    columns.append(TimeElapsedColumn())
    return Progress(*columns, console=console, transient=True, redirect_stdout=False)


def track_bytes(
    items: Iterable[T],
    total: int,
    description: str,
    size: Callable[[T], int],
    *,
    show: bool | None = None,
    min_total: int | None = None,
    stream: TextIO | None = None,
) -> Iterator[T]:
    """Yield `items` unchanged while a bar counts `size(item)` bytes of `total`.

    Args:
        items: the work, consumed lazily.
        total: the bytes all items together account for.
        description: what is being done, e.g. ``"loading lenet.bundle"``.
        size: the bytes one item accounts for.
        show: force the bar on or off (default: `enabled()`).
        min_total: no bar below this many bytes (default `MIN_BYTES`; 0 always shows).
        stream: where to draw (default ``sys.stderr``).

    Returns:
        An iterator over `items`.
    """
    floor = MIN_BYTES if min_total is None else min_total
    if total < floor or not enabled(show, stream):
        yield from items
        return
    with _progress(bar=True, stream=stream) as p:
        task = p.add_task(description, total=total)
        for item in items:
            p.advance(task, size(item))
            yield item


@contextmanager
def spinner(
    description: str, *, show: bool | None = None, stream: TextIO | None = None
) -> Iterator[None]:
    """Show a spinner and the elapsed time while the block runs (for work of unknown length).

    Args:
        description: what is being done, e.g. ``"deriving the VJP module with Enzyme"``.
        show: force it on or off (default: `enabled()`).
        stream: where to draw (default ``sys.stderr``).

    Returns:
        A context manager; the spinner disappears when the block ends, however it ends.
    """
    if not enabled(show, stream):
        yield
        return
    with _progress(bar=False, stream=stream) as p:
        p.add_task(description, total=None)
        yield
