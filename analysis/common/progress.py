"""Progress of long analyses on stderr (tqdm): windows done of the total, time left.

Shown only when the analysis runs longer than DELAY_S, on a terminal; `--progress`
forces it (a log file, CI), `--quiet` silences it. Never on stdout, which stays for the
one line that says what was written.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

DELAY_S = 2.0


@contextmanager
def progress_bar(desc: str, wanted: bool | None) -> Iterator[Callable[[int, int], None]]:
    """A `progress(done, total)` callback drawing a bar; `wanted` None: only on a terminal."""
    show = sys.stderr.isatty() if wanted is None else wanted
    if not show:
        yield lambda done, total: None
        return
    from tqdm import tqdm  # here, where a bar may show: 11 ms of every start otherwise

    bars: list = []                   # made at the first call, when the total is known

    def update(done: int, total: int) -> None:
        if not bars:
            bars.append(tqdm(desc=desc, total=total, unit="window", file=sys.stderr,
                             delay=0 if wanted else DELAY_S, leave=False,
                             dynamic_ncols=True))
        bar = bars[0]
        if bar.total != total:
            bar.total = total
        bar.update(done - bar.n)           # update(), not refresh(): it honours the delay

    try:
        yield update
    finally:
        for bar in bars:
            bar.close()
