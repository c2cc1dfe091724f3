"""The one interface every strategy implements.

A strategy is a generator: it yields a batch of candidates, in order of preference, and is sent back
the index of the first one that still fails the same way (which becomes the current candidate), or
None when none did. Batches let the driver check candidates in any order or in parallel while the
outcome stays that of checking them one by one.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Protocol

from reducer.candidate import Candidate
from reducer.model import Model

Proposals = Generator[list[Candidate], "int | None", None]


@dataclass
class SearchContext:
    model: Model
    failing_outputs: tuple[str, ...]  # outputs that failed in the current candidate's verdict

    def failing_producers(self, current: Candidate) -> list[int]:
        producers = {self.model.producer.get(name) for name in self.failing_outputs}
        return sorted(p for p in producers if p is not None and p in current.nodes)


class Strategy(Protocol):
    name: str

    def search(self, current: Candidate, context: SearchContext) -> Proposals: ...
