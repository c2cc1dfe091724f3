"""Reduction strategies, registered by name; third parties add theirs through the
`onnx_reducer.strategies` entry point group. The driver knows none of them by name."""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import entry_points

from reducer.errors import UsageError

BUILTIN_STRATEGIES = {
    "localize": "strategies.localize:FirstDivergence",
    "cone": "strategies.cone:ConeOfInfluence",
    "origin": "strategies.origin:FailureOrigin",
    "overflow": "strategies.overflow:OverflowOnset",
    "bisect": "strategies.bisect:BoundaryBisection",
    "prefix": "strategies.prefix:ShortestFailingPrefix",
    "suffix": "strategies.suffix:ShortestFailingSuffix",
    "regions": "strategies.regions:DominatorRegions",
    "chunks": "strategies.chunks:AdaptiveChunks",
    "ddmin": "strategies.ddmin:DeltaDebugging",
    "probdd": "strategies.probdd:ProbabilisticDeltaDebugging",
    "linear": "strategies.linear:LinearSweep",
    "singletons": "strategies.singletons:SingleNodes",
    "shapes": "strategies.shapes:SmallerInputs",
    "attributes": "strategies.attributes:AttributeDefaults",
    "weights": "strategies.weights:SimplerWeights",
    "branches": "strategies.branches:InlineControlFlow",
    "bodies": "strategies.bodies:ReduceBodies",
}
# the top level first: the nodes inside an If that must stay (bodies) are cut once little is left around it
DEFAULT_ORDER = ("branches", "cone", "overflow", "origin", "localize", "singletons", "prefix", "suffix", "bodies",
                 "ddmin", "regions", "linear")


def available() -> dict[str, str]:
    found = dict(BUILTIN_STRATEGIES)
    for entry in entry_points(group="onnx_reducer.strategies"):
        found.setdefault(entry.name, entry.value)
    return found


def check_names(names: list[str]) -> dict[str, str]:
    """Where each named strategy lives; a usage error for the first unknown name."""
    known = available()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"unknown strategy '{unknown[0]}' (known: {', '.join(known)})")
    return known


def make_strategies(names: list[str]) -> list:
    known = check_names(names)
    made = []
    for name in names:
        module, _, attr = known[name].partition(":")
        made.append(getattr(import_module(module), attr)())
    return made
