"""Verdicts by candidate and oracle, persisted as JSON lines: a re-run repeats no check."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from oracles.base import Verdict


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
                    self._verdicts[entry["key"]] = Verdict.from_json(entry["verdict"])
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut short by a crash: the rest still counts
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a")

    def key(self, candidate_key: str) -> str:
        return hashlib.sha256(f"{self.namespace}:{candidate_key}".encode()).hexdigest()

    def get(self, candidate_key: str) -> Verdict | None:
        return self._verdicts.get(self.key(candidate_key))

    def put(self, candidate_key: str, verdict: Verdict) -> None:
        key = self.key(candidate_key)
        self._verdicts[key] = verdict
        self._file.write(json.dumps({"key": key, "verdict": verdict.to_json()}) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()
