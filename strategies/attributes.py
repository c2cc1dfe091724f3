"""Attributes back to their defaults: for each kept node, each optional attribute that differs from the
operator's default is dropped, one at a time, where the failure survives (the candidate is compared
against a reference run of itself). A repro whose nodes carry only the attributes the bug needs."""

from __future__ import annotations

import onnx
from onnx import defs

from reducer.candidate import AttributeDefault, Candidate
from strategies.base import Proposals, SearchContext


def resettable(node: onnx.NodeProto, opset: int) -> list[str]:
    """Attributes of `node` the schema makes optional, set to something other than their default."""
    try:
        schema = defs.get_schema(node.op_type, opset, node.domain)
    except Exception:  # a custom or unknown operator: its attributes may all matter
        return []
    names = []
    for attribute in node.attribute:
        spec = schema.attributes.get(attribute.name)
        if spec is None or spec.required or attribute.type == onnx.AttributeProto.GRAPH:
            continue
        default = spec.default_value
        if default.type and onnx.helper.get_attribute_value(default) == onnx.helper.get_attribute_value(attribute):
            continue  # already the default: dropping it changes nothing
        names.append(attribute.name)
    return names


class AttributeDefaults:
    name = "attributes"

    def search(self, current: Candidate, context: SearchContext) -> Proposals:
        opsets = {o.domain: o.version for o in context.model.proto.opset_import}
        done = {(e.node, e.attribute) for e in current.edits if isinstance(e, AttributeDefault)}
        for index in current.ordered():
            node = context.model.nodes[index]
            for attribute in resettable(node, opsets.get(node.domain, opsets.get("", 1))):
                if (index, attribute) in done:
                    continue
                trial = current.with_edit(AttributeDefault(index, attribute))
                if (yield [trial]) is not None:
                    current = trial
