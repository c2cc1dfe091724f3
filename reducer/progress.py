"""Progress for people: a live rich line on a terminal, plain lines otherwise (logs, CI)."""

from __future__ import annotations

import sys
import time

from reducer.driver import Counters, Progress


class PlainProgress(Progress):
    """One line when the node count drops, and at most one every few seconds otherwise."""

    def __init__(self, stream=None, every: float = 5.0):
        self.stream, self.every = stream or sys.stderr, every  # today's stderr, not the one at import
        self.started = time.perf_counter()
        self._last_nodes, self._last_time = None, 0.0

    def _line(self, nodes: int, counters: Counters, strategy: str) -> str:
        return (
            f"[{time.perf_counter() - self.started:7.1f}s] {strategy:<8} nodes {nodes:>6}  "
            f"checks {counters.checks:>5}  cache hits {counters.cache_hits:>5}  unfaithful {counters.unfaithful:>4}"
        )

    def update(self, nodes: int, counters: Counters, strategy: str) -> None:
        now = time.perf_counter()
        if nodes != self._last_nodes or now - self._last_time >= self.every:
            self._last_nodes, self._last_time = nodes, now
            print(self._line(nodes, counters, strategy), file=self.stream, flush=True)

    def message(self, text: str) -> None:
        print(text, file=self.stream, flush=True)


class RichProgress(PlainProgress):
    """The same facts as a live status line that rewrites itself."""

    def __init__(self):
        super().__init__()
        from rich.console import Console
        from rich.live import Live

        self.console = Console(stderr=True)
        self.live = Live(console=self.console, refresh_per_second=8, transient=True)
        self.live.start()

    def update(self, nodes: int, counters: Counters, strategy: str) -> None:
        from rich.text import Text

        line = self._line(nodes, counters, strategy)
        self.live.update(Text(line, style="bold cyan"))

    def message(self, text: str) -> None:
        self.console.print(text, highlight=False, markup=False)

    def stop(self) -> None:
        self.live.stop()


def make_progress(quiet: bool = False) -> Progress:
    if quiet:
        return Progress()
    if sys.stderr.isatty():
        return RichProgress()
    return PlainProgress()
