"""Tests of the job graph and FLIP-147's tasks-to-trigger computation (tests/support/flip147_graph.py).

The brute-force reference below enumerates every subtask-level connection itself, with the ranges
written the way Flink's ``EdgeManagerBuildUtil.connectPointwise`` loops over them, so it shares no
code with the module under test.

Finished sets: the property tests draw both arbitrary finished sets (FINISHED reports can reach the
coordinator out of order, FLIP-147 "Triggering Checkpoints After Tasks Finished", so the plan must
be right for any set) and downward-closed ones (a subtask finishes only after all its upstream
subtasks did, the steady state a job really passes through).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.flip147_graph import (
    CheckpointPlan,
    DistributionPattern,
    Edge,
    JobGraph,
    SubtaskId,
    Vertex,
    VertexKind,
    fully_finished_operators,
    plan_checkpoint,
    pointwise_downstream,
    pointwise_upstream,
    running_tasks,
    tasks_to_trigger,
)
from twophase.sinks.errors import ConfigError

A2A = DistributionPattern.ALL_TO_ALL
PW = DistributionPattern.POINTWISE
SRC, STAGE, SINK = VertexKind.SOURCE, VertexKind.STAGE, VertexKind.SINK


def s(vertex: str, *indices: int) -> set[SubtaskId]:
    return {SubtaskId(vertex, i) for i in indices}


def chain(*specs: tuple[str, int], pattern: DistributionPattern) -> JobGraph:
    """A linear job: first spec is the source, last the sink."""
    kinds = [SRC] + [STAGE] * (len(specs) - 2) + [SINK]
    vertices = [Vertex(name, kind, p) for (name, p), kind in zip(specs, kinds, strict=True)]
    edges = [Edge(a[0], b[0], pattern) for a, b in itertools.pairwise(specs)]
    return JobGraph(vertices, edges)


# --- the brute-force reference -------------------------------------------------------------------


def flink_pointwise_connections(p: int, q: int) -> set[tuple[int, int]]:
    """(upstream, downstream) index pairs of a POINTWISE edge, looped as Flink does."""
    pairs: set[tuple[int, int]] = set()
    if p == q:
        pairs = {(i, i) for i in range(p)}
    elif p > q:
        for j in range(q):
            for i in range(j * p // q, (j + 1) * p // q):
                pairs.add((i, j))
    else:
        for i in range(p):
            for j in range((i * q + p - 1) // p, ((i + 1) * q + p - 1) // p):
                pairs.add((i, j))
    return pairs


def reference_edges(graph: JobGraph) -> set[tuple[SubtaskId, SubtaskId]]:
    edges: set[tuple[SubtaskId, SubtaskId]] = set()
    for vid in graph.vertices:
        for edge in graph.inputs(vid):
            p = graph.vertices[edge.source].parallelism
            q = graph.vertices[edge.target].parallelism
            if edge.pattern is A2A:
                pairs = {(i, j) for i in range(p) for j in range(q)}
            else:
                pairs = flink_pointwise_connections(p, q)
            edges |= {(SubtaskId(edge.source, i), SubtaskId(edge.target, j)) for i, j in pairs}
    return edges


def reference_tasks_to_trigger(graph: JobGraph, finished: set[SubtaskId]) -> set[SubtaskId]:
    """O(n^2): a subtask is triggered iff it runs and every subtask upstream of it finished."""
    everything = {SubtaskId(vid, i) for vid, v in graph.vertices.items() for i in range(v.parallelism)}
    running = everything - finished
    has_running_predecessor = {down for up, down in reference_edges(graph) if up in running}
    return running - has_running_predecessor


# --- pointwise connection pattern ----------------------------------------------------------------


@pytest.mark.parametrize("p", range(1, 13))
@pytest.mark.parametrize("q", range(1, 13))
def test_pointwise_ranges_match_flink_pattern(p: int, q: int) -> None:
    expected = flink_pointwise_connections(p, q)
    via_upstream = {(i, j) for j in range(q) for i in pointwise_upstream(j, p, q)}
    via_downstream = {(i, j) for i in range(p) for j in pointwise_downstream(i, p, q)}
    assert via_upstream == expected
    assert via_downstream == expected
    # every subtask on either side has at least one connection; max(p, q) connections in all
    assert {i for i, _ in expected} == set(range(p))
    assert {j for _, j in expected} == set(range(q))
    assert len(expected) == max(p, q)


def test_pointwise_documented_examples() -> None:
    # fan-in p=5, q=2 and fan-out p=2, q=5, as written in the module docstring
    assert [list(pointwise_upstream(j, 5, 2)) for j in range(2)] == [[0, 1], [2, 3, 4]]
    assert [list(pointwise_downstream(i, 2, 5)) for i in range(2)] == [[0, 1, 2], [3, 4]]
    assert [list(pointwise_upstream(j, 2, 5)) for j in range(5)] == [[0], [0], [0], [1], [1]]


def test_subtask_edges_enumerates_every_connection() -> None:
    graph = JobGraph(
        [Vertex("src", SRC, 3), Vertex("map", STAGE, 5), Vertex("sink", SINK, 2)],
        [Edge("src", "map", PW), Edge("map", "sink", A2A)],
    )
    edges = list(graph.subtask_edges())
    assert len(edges) == 5 + 10
    assert set(edges) == reference_edges(graph)


# --- hand examples from FLIP-147 -----------------------------------------------------------------


def test_flip147_figure2_finished_source_task_triggers_its_downstream() -> None:
    # FLIP-147 Figure 2: tasks A, B (source) -> C, D; A finished. Triggering only B would leave C
    # without a barrier, so C becomes a new root.
    graph = chain(("source", 2), ("sink", 2), pattern=PW)
    finished = s("source", 0)
    assert tasks_to_trigger(graph, finished) == s("source", 1) | s("sink", 0)
    assert tasks_to_trigger(graph, finished) == reference_tasks_to_trigger(graph, finished)


def test_appendix1_observation1_all_to_all_with_a_running_upstream_triggers_nothing_downstream() -> None:
    graph = chain(("source", 3), ("sink", 4), pattern=A2A)
    assert tasks_to_trigger(graph, s("source", 0, 1)) == s("source", 2)
    # once every upstream subtask finished, every running downstream subtask is a root
    assert tasks_to_trigger(graph, s("source", 0, 1, 2) | s("sink", 3)) == s("sink", 0, 1, 2)


def test_appendix1_observation2_pointwise_with_all_upstream_running_triggers_nothing_downstream() -> None:
    graph = chain(("source", 2), ("map", 2), ("sink", 2), pattern=PW)
    # source all running: map and sink are reached by barriers, only the sources are triggered
    assert tasks_to_trigger(graph, s("sink", 0)) == s("source", 0, 1)
    # map[0] seen finished before its source (out of order): sink[0] has no running input left
    assert tasks_to_trigger(graph, s("map", 0)) == s("source", 0, 1) | s("sink", 0)
    assert tasks_to_trigger(graph, s("source", 0) | s("map", 0)) == s("source", 1) | s("sink", 0)


def test_blog_figure4_cascading_two_phase_commit_tasks() -> None:
    # a chain of tasks each holding a 2PC operator: as each finishes, the next becomes the root
    graph = chain(("source", 1), ("tx1", 1), ("tx2", 1), ("sink", 1), pattern=PW)
    assert tasks_to_trigger(graph, set()) == s("source", 0)
    assert tasks_to_trigger(graph, s("source", 0)) == s("tx1", 0)
    assert tasks_to_trigger(graph, s("source", 0) | s("tx1", 0)) == s("tx2", 0)
    assert tasks_to_trigger(graph, s("source", 0) | s("tx1", 0) | s("tx2", 0)) == s("sink", 0)


def test_pointwise_fan_out_p_less_than_q() -> None:
    graph = chain(("source", 2), ("sink", 5), pattern=PW)
    # source[0] feeds sink[0..2]; source[1] feeds sink[3..4]
    assert tasks_to_trigger(graph, s("source", 0)) == s("source", 1) | s("sink", 0, 1, 2)
    assert tasks_to_trigger(graph, s("source", 1) | s("sink", 3)) == s("source", 0) | s("sink", 4)


def test_pointwise_fan_in_p_greater_than_q() -> None:
    graph = chain(("source", 5), ("sink", 2), pattern=PW)
    # sink[0] reads source[0..1]; sink[1] reads source[2..4]
    assert tasks_to_trigger(graph, s("source", 0)) == s("source", 1, 2, 3, 4)
    assert tasks_to_trigger(graph, s("source", 0, 1)) == s("source", 2, 3, 4) | s("sink", 0)
    assert tasks_to_trigger(graph, s("source", 0, 1, 2, 3)) == s("source", 4) | s("sink", 0)


def test_mixed_inputs_all_to_all_finished_pointwise_partly_running() -> None:
    graph = JobGraph(
        [
            Vertex("dim", SRC, 3),
            Vertex("facts", SRC, 2),
            Vertex("join", STAGE, 2),
            Vertex("sink", SINK, 2),
        ],
        [Edge("dim", "join", A2A), Edge("facts", "join", PW), Edge("join", "sink", PW)],
    )
    # dim still partly running: its ALL_TO_ALL edge shields all of join
    assert tasks_to_trigger(graph, s("dim", 0, 1) | s("facts", 0)) == s("dim", 2) | s("facts", 1)
    # dim done: join[0] (facts[0] done) is a root, join[1] still behind facts[1]
    finished = s("dim", 0, 1, 2) | s("facts", 0)
    assert tasks_to_trigger(graph, finished) == s("facts", 1) | s("join", 0)
    assert tasks_to_trigger(graph, finished) == reference_tasks_to_trigger(graph, finished)


def test_diamond_with_two_sinks() -> None:
    graph = JobGraph(
        [
            Vertex("src", SRC, 2),
            Vertex("left", STAGE, 2),
            Vertex("right", STAGE, 4),
            Vertex("kafka", SINK, 2),
            Vertex("delta", SINK, 1),
        ],
        [
            Edge("src", "left", PW),
            Edge("src", "right", A2A),
            Edge("left", "kafka", PW),
            Edge("right", "kafka", PW),
            Edge("right", "delta", A2A),
        ],
    )
    finished = s("src", 0, 1) | s("left", 1) | s("right", 0, 1, 3)
    # left[0] runs with src done; kafka[0] reads left[0] (running) so waits; kafka[1] reads left[1]
    # (done) and right[2..3] (right[2] running): not a root; right[2] is a root; delta behind right[2].
    assert tasks_to_trigger(graph, finished) == s("left", 0) | s("right", 2)
    assert tasks_to_trigger(graph, finished) == reference_tasks_to_trigger(graph, finished)


def test_none_finished_triggers_exactly_the_sources() -> None:
    graph = JobGraph(
        [Vertex("a", SRC, 3), Vertex("b", SRC, 2), Vertex("m", STAGE, 4), Vertex("k", SINK, 4)],
        [Edge("a", "m", A2A), Edge("b", "m", PW), Edge("m", "k", PW)],
    )
    assert tasks_to_trigger(graph, set()) == s("a", 0, 1, 2) | s("b", 0, 1)


def test_all_finished_triggers_nothing() -> None:
    graph = chain(("source", 3), ("map", 2), ("sink", 4), pattern=A2A)
    everything = set(graph.subtasks())
    assert len(everything) == 9
    assert tasks_to_trigger(graph, everything) == set()
    plan = plan_checkpoint(graph, everything)
    assert plan.all_finished
    assert plan.tasks_to_wait_for == frozenset()
    assert plan.fully_finished_operators == {"source", "map", "sink"}


def test_out_of_order_finished_reports_still_give_the_roots() -> None:
    # FLIP-147: a task may be seen FINISHED before its upstream. The sink finished while the source
    # still runs: the source is triggered, the finished sink is not.
    graph = chain(("source", 1), ("map", 1), ("sink", 1), pattern=PW)
    assert tasks_to_trigger(graph, s("sink", 0)) == s("source", 0)
    assert tasks_to_trigger(graph, s("source", 0) | s("sink", 0)) == s("map", 0)


# --- fully finished operators and the plan -------------------------------------------------------


def test_fully_finished_operators() -> None:
    graph = chain(("source", 3), ("map", 2), ("sink", 2), pattern=A2A)
    assert fully_finished_operators(graph, set()) == set()
    assert fully_finished_operators(graph, s("source", 0, 1)) == set()
    assert fully_finished_operators(graph, s("source", 0, 1, 2) | s("map", 1)) == {"source"}
    assert fully_finished_operators(graph, s("source", 0, 1, 2) | s("map", 0, 1)) == {"source", "map"}


def test_plan_checkpoint_waits_for_and_commits_to_every_running_subtask() -> None:
    graph = chain(("source", 2), ("map", 2), ("sink", 2), pattern=PW)
    finished = s("source", 0, 1) | s("map", 0)
    plan = plan_checkpoint(graph, finished)
    running = s("map", 1) | s("sink", 0, 1)
    assert plan == CheckpointPlan(
        tasks_to_trigger=frozenset(s("map", 1) | s("sink", 0)),
        tasks_to_wait_for=frozenset(running),
        tasks_to_commit_to=frozenset(running),
        finished_tasks=frozenset(finished),
        fully_finished_operators=frozenset({"source"}),
    )
    assert not plan.all_finished
    assert running_tasks(graph, finished) == running


# --- validation ----------------------------------------------------------------------------------


def _graph(vertices: list[Vertex], edges: list[Edge]) -> Callable[[], JobGraph]:
    return lambda: JobGraph(vertices, edges)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (_graph([Vertex("a", SRC, 1), Vertex("a", SINK, 1)], []), "duplicate vertex id 'a'"),
        (_graph([Vertex("", SRC, 1)], []), "non-empty"),
        (_graph([Vertex("a", SRC, 0)], []), "parallelism >= 1"),
        (_graph([Vertex("a", SRC, 1)], [Edge("a", "b", PW)]), "unknown vertex 'b'"),
        (_graph([Vertex("b", SINK, 1)], [Edge("a", "b", PW)]), "unknown vertex 'a'"),
        (
            _graph([Vertex("a", SRC, 1), Vertex("b", SINK, 1)], [Edge("a", "b", PW), Edge("a", "b", A2A)]),
            "duplicate edge 'a' -> 'b'",
        ),
        (
            _graph(
                [Vertex("s", SRC, 1), Vertex("x", STAGE, 1), Vertex("y", STAGE, 1)],
                [Edge("s", "x", PW), Edge("x", "y", PW), Edge("y", "x", A2A)],
            ),
            r"cycle through vertices \['x', 'y'\]",
        ),
        (
            _graph([Vertex("s", SRC, 1), Vertex("x", STAGE, 1)], [Edge("s", "x", PW), Edge("x", "x", PW)]),
            r"cycle through vertices \['x'\]",
        ),
        (
            _graph([Vertex("a", SRC, 1), Vertex("b", SRC, 1)], [Edge("a", "b", PW)]),
            "source 'b' has inputs",
        ),
        (_graph([Vertex("a", SRC, 1), Vertex("b", STAGE, 1)], []), "stage 'b' has no inputs"),
        (
            _graph(
                [Vertex("a", SRC, 1), Vertex("b", SINK, 1), Vertex("c", SINK, 1)],
                [Edge("a", "b", PW), Edge("b", "c", PW)],
            ),
            "sink 'b' has outputs",
        ),
    ],
)
def test_invalid_graphs_raise_config_error(build: Callable[[], JobGraph], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build()


@pytest.mark.parametrize(
    "bad",
    [SubtaskId("nope", 0), SubtaskId("source", 2), SubtaskId("source", -1)],
)
def test_finished_set_with_unknown_subtask_raises(bad: SubtaskId) -> None:
    graph = chain(("source", 2), ("sink", 2), pattern=PW)
    for compute in (tasks_to_trigger, fully_finished_operators, plan_checkpoint):
        with pytest.raises(ConfigError, match="job graph: subtask"):
            compute(graph, {bad})


def test_unknown_vertex_lookup_raises() -> None:
    graph = chain(("source", 2), ("sink", 2), pattern=PW)
    with pytest.raises(ConfigError, match="unknown vertex 'x'"):
        graph.inputs("x")
    assert graph.sources() == ("source",)
    assert graph.sinks() == ("sink",)
    assert graph.num_subtasks == 4


# --- property tests against the reference --------------------------------------------------------


@st.composite
def random_dags(draw: st.DrawFn) -> JobGraph:
    """1-7 vertices, parallelism 1-6; vertex k>0 reads a random subset of earlier vertices."""
    n = draw(st.integers(1, 7))
    parallelism = [draw(st.integers(1, 6)) for _ in range(n)]
    edges: list[Edge] = []
    for k in range(1, n):
        inputs = draw(st.sets(st.integers(0, k - 1), max_size=3))
        for u in sorted(inputs):
            edges.append(Edge(f"v{u}", f"v{k}", draw(st.sampled_from([A2A, PW]))))
    has_inputs = {e.target for e in edges}
    has_outputs = {e.source for e in edges}
    vertices = []
    for k in range(n):
        vid = f"v{k}"
        kind = SRC if vid not in has_inputs else (STAGE if vid in has_outputs else SINK)
        vertices.append(Vertex(vid, kind, parallelism[k]))
    return JobGraph(vertices, edges)


@st.composite
def graphs_with_any_finished(draw: st.DrawFn) -> tuple[JobGraph, set[SubtaskId]]:
    graph = draw(random_dags())
    finished = {t for t in graph.subtasks() if draw(st.booleans())}
    return graph, finished


@st.composite
def graphs_with_downward_closed_finished(draw: st.DrawFn) -> tuple[JobGraph, set[SubtaskId]]:
    """A subtask may have finished only if every subtask upstream of it has."""
    graph = draw(random_dags())
    upstream: dict[SubtaskId, set[SubtaskId]] = {}
    for up, down in reference_edges(graph):
        upstream.setdefault(down, set()).add(up)
    finished: set[SubtaskId] = set()
    for t in graph.subtasks():  # topological order: upstream decided first
        if upstream.get(t, set()) <= finished and draw(st.booleans()):
            finished.add(t)
    return graph, finished


@settings(max_examples=400, deadline=None)
@given(graphs_with_any_finished())
def test_matches_reference_on_any_finished_set(case: tuple[JobGraph, set[SubtaskId]]) -> None:
    graph, finished = case
    assert tasks_to_trigger(graph, finished) == reference_tasks_to_trigger(graph, finished)


@settings(max_examples=400, deadline=None)
@given(graphs_with_downward_closed_finished())
def test_matches_reference_on_downward_closed_finished_set(case: tuple[JobGraph, set[SubtaskId]]) -> None:
    graph, finished = case
    triggered = tasks_to_trigger(graph, finished)
    assert triggered == reference_tasks_to_trigger(graph, finished)
    running = set(graph.subtasks()) - finished
    # a checkpoint is possible exactly while something runs
    assert bool(triggered) == bool(running)


@settings(max_examples=300, deadline=None)
@given(graphs_with_any_finished())
def test_barriers_from_the_triggered_tasks_reach_every_running_task(
    case: tuple[JobGraph, set[SubtaskId]],
) -> None:
    graph, finished = case
    running = set(graph.subtasks()) - finished
    downstream: dict[SubtaskId, set[SubtaskId]] = {}
    for up, down in reference_edges(graph):
        if up in running and down in running:
            downstream.setdefault(up, set()).add(down)
    reached = set(tasks_to_trigger(graph, finished))
    frontier = list(reached)
    while frontier:
        for nxt in downstream.get(frontier.pop(), set()):
            if nxt not in reached:
                reached.add(nxt)
                frontier.append(nxt)
    assert reached == running
    plan = plan_checkpoint(graph, finished)
    assert plan.tasks_to_wait_for == running
    assert plan.tasks_to_trigger <= plan.tasks_to_wait_for
    assert plan.fully_finished_operators == {
        vid
        for vid, v in graph.vertices.items()
        if all(SubtaskId(vid, i) in finished for i in range(v.parallelism))
    }
