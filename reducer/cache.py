"""Verdicts by candidate and oracle, persisted as JSON lines: a re-run repeats no check."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from oracles.base import Verdict

# How an older version's cache lines, written before verdicts said whether they last, show a check killed from
# outside (a command killed so, whose exit code does not count as failing, says "exit code -9"), or none judged.
_KILLED_FROM_OUTSIDE = re.compile(r"\b(SIGKILL|SIGTERM|SIGINT|SIGHUP|exit code -(9|15|2|1))\b")
_NO_VERDICT = "the reference run of this candidate fails"


def _lasting_old_line(verdict: Verdict) -> bool:
    detail = verdict.signature.detail if verdict.signature else ""
    return not _KILLED_FROM_OUTSIDE.search(f"{detail} {verdict.reason}") and not verdict.reason.startswith(
        _NO_VERDICT)


class VerdictCache:
    def __init__(self, path: Path, namespace: str):
        """`namespace` holds everything a verdict depends on besides the candidate: model, inputs, oracle."""
        self.path = path
        self.namespace = namespace
        self._verdicts: dict[str, Verdict] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    entry = json.loads(line)
                    verdict = Verdict.from_json(entry["verdict"])
                except (ValueError, KeyError, TypeError, AttributeError):
                    continue  # a line cut short by a crash: the rest still counts
                if _lasting_old_line(verdict):  # an older version kept killed checks too
                    self._verdicts[entry["key"]] = verdict
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a")

    def key(self, candidate_key: str) -> str:
        return hashlib.sha256(f"{self.namespace}:{candidate_key}".encode()).hexdigest()

    def get(self, candidate_key: str) -> Verdict | None:
        return self._verdicts.get(self.key(candidate_key))

    def put(self, candidate_key: str, verdict: Verdict, on_disk: bool = True) -> None:
        """Keep a verdict, unless it does not last (a check killed from outside, or none judged: a re-run checks
        it again); never called for the final re-check (Reduction.reverify). `on_disk` False: for this process
        only (a key that means nothing to another)."""
        if not verdict.lasting:
            return
        key = self.key(candidate_key)
        self._verdicts[key] = verdict
        if on_disk:
            self._file.write(json.dumps({"key": key, "verdict": verdict.to_json()}) + "\n")
            self._file.flush()

    def close(self) -> None:
        self._file.close()
