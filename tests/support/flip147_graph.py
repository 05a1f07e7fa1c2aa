"""FLIP-147 Appendix 1 as a reference model: which tasks a checkpoint is triggered at when some
have finished. No production path uses it, and here is why Spark does not need it.

Flink runs long-lived tasks: when some finish (a bounded source) while others keep running,
barriers must start at the running tasks with no running predecessor, or the checkpoint would
never reach them. A Spark epoch is one Spark job whose tasks all end with the epoch; between
epochs no task runs at all, and the sinks' subtasks live on the driver as lifecycles, not as tasks.
So the runtime never routes a checkpoint around finished tasks: an epoch's checkpoint expects one
acknowledgement per sink and partition it ran, the final checkpoint is triggered at every live
subtask that still holds in-progress state (``coordinator.driver_finish.final_participants``), and
a sink is flagged fully finished when all its subtasks are FINISHED with nothing pending
(``coordinator.checkpoint_coordinator``) — one rule each, with no graph. This module stays as the
property-tested model of the algorithm (and its benchmark) for an execution layer with
long-running tasks.

The job graph and the checkpoint plan when some subtasks have finished (FLIP-147).

A :class:`JobGraph` has operators (vertices: sources, stages, sinks, each with a parallelism) joined
by edges that are ``ALL_TO_ALL`` or ``POINTWISE``, as in Flink's ``DistributionPattern``. A
*subtask* is one parallel instance of an operator, named by :class:`SubtaskId`.

Subtask-level connections of an edge ``A -> B`` with ``p = A.parallelism`` and ``q = B.parallelism``
(the same ranges as Flink's ``EdgeManagerBuildUtil.connectPointwise``):

- ``ALL_TO_ALL``: every subtask of A feeds every subtask of B (``p * q`` connections).
- ``POINTWISE`` with ``p == q``: ``A[i] -> B[i]``.
- ``POINTWISE`` with ``p > q`` (fan-in): ``B[j]`` reads ``A[i]`` for ``i`` in
  ``[floor(j*p/q), floor((j+1)*p/q))``; every upstream subtask feeds exactly one downstream one.
  E.g. p=5, q=2: ``B[0] <- A[0], A[1]`` and ``B[1] <- A[2], A[3], A[4]``.
- ``POINTWISE`` with ``p < q`` (fan-out): ``A[i]`` feeds ``B[j]`` for ``j`` in
  ``[ceil(i*q/p), ceil((i+1)*q/p))``; equivalently ``B[j]`` reads exactly ``A[floor(j*p/q)]``.
  E.g. p=2, q=5: ``A[0] -> B[0], B[1], B[2]`` and ``A[1] -> B[3], B[4]``.

Either way every subtask of B has at least one upstream subtask of A on a POINTWISE edge, and a
POINTWISE edge has ``max(p, q)`` subtask-level connections.

Checkpoints after tasks finished (FLIP-147, "Triggering Checkpoints After Tasks Finished"): a
checkpoint is triggered at the running subtasks that have no running predecessor (the new "roots";
the barriers reach every other running subtask from them), every running subtask must acknowledge
it, and operators all of whose subtasks finished are flagged *fully finished* in the checkpoint and
skipped on restore. :func:`tasks_to_trigger` computes the roots with FLIP-147 Appendix 1's
algorithm in ``O(n + e')`` (``n`` subtasks, ``e'`` POINTWISE subtask connections), never enumerating
the ``p * q`` connections of an ALL_TO_ALL edge.

The finished set may be any set of subtasks, not only a "downward-closed" one where a subtask has
finished only after all its upstream subtasks did: FLIP-147 notes that FINISHED reports can reach
the coordinator out of order ("some tasks might report FINISHED after its descendant tasks"), so
the coordinator must compute a correct plan from whatever it has seen. The definition ("running and
no running predecessor") and the algorithm below are exact for arbitrary sets.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping, Set
from dataclasses import dataclass
from types import MappingProxyType

from twophase.sinks.errors import ConfigError

__all__ = [
    "CheckpointPlan",
    "DistributionPattern",
    "Edge",
    "JobGraph",
    "SubtaskId",
    "Vertex",
    "VertexKind",
    "fully_finished_operators",
    "plan_checkpoint",
    "pointwise_downstream",
    "pointwise_upstream",
    "running_tasks",
    "tasks_to_trigger",
]


class VertexKind(str, enum.Enum):
    """The role of an operator: a source has no inputs, a sink has no outputs, a stage is between."""

    SOURCE = "source"
    STAGE = "stage"
    SINK = "sink"


class DistributionPattern(str, enum.Enum):
    """How the subtasks of two connected operators connect (Flink's ``DistributionPattern``).

    See the module docstring for the exact POINTWISE ranges when the parallelisms differ.
    """

    ALL_TO_ALL = "all_to_all"
    POINTWISE = "pointwise"


@dataclass(frozen=True)
class Vertex:
    """One operator of the job graph.

    Attributes:
        id: unique, non-empty operator id (e.g. ``"kafka-sink"``).
        kind: source, stage or sink.
        parallelism: number of subtasks, >= 1.
    """

    id: str
    kind: VertexKind
    parallelism: int


@dataclass(frozen=True)
class Edge:
    """A directed connection ``source -> target`` between two operators (by id)."""

    source: str
    target: str
    pattern: DistributionPattern


@dataclass(frozen=True, order=True, slots=True)
class SubtaskId:
    """One parallel instance of an operator.

    Attributes:
        vertex: the operator id.
        index: the subtask index, in ``[0, parallelism)``.
    """

    vertex: str
    index: int

    def __str__(self) -> str:
        return f"{self.vertex}[{self.index}]"


def pointwise_upstream(index: int, upstream_parallelism: int, downstream_parallelism: int) -> range:
    """The upstream subtask indices that downstream subtask ``index`` reads on a POINTWISE edge.

    Args:
        index: downstream subtask index, in ``[0, downstream_parallelism)``.
        upstream_parallelism: ``p``, >= 1.
        downstream_parallelism: ``q``, >= 1.

    Returns:
        ``range(floor(index*p/q), floor((index+1)*p/q))`` when ``p >= q``, else the single index
        ``floor(index*p/q)`` (Flink's pointwise pattern; never empty).
    """
    p, q = upstream_parallelism, downstream_parallelism
    start = index * p // q
    if p >= q:
        return range(start, (index + 1) * p // q)
    return range(start, start + 1)


def pointwise_downstream(index: int, upstream_parallelism: int, downstream_parallelism: int) -> range:
    """The downstream subtask indices that upstream subtask ``index`` feeds on a POINTWISE edge.

    The inverse of :func:`pointwise_upstream`: ``range(ceil(index*q/p), ceil((index+1)*q/p))`` when
    ``p <= q``, else the single index ``ceil((index+1)*q/p) - 1``.
    """
    p, q = upstream_parallelism, downstream_parallelism
    if p <= q:
        return range(-(-index * q // p), -(-(index + 1) * q // p))
    last = -(-(index + 1) * q // p) - 1
    return range(last, last + 1)


class JobGraph:
    """An immutable, validated DAG of operators.

    Args:
        vertices: the operators; ids must be unique and non-empty, parallelism >= 1.
        edges: the connections; both ends must be known vertices, at most one edge per
            ``(source, target)`` pair, no cycles (self-loops included). A vertex has inputs iff it
            is not a source, and a sink has no outputs.

    Raises:
        ConfigError: on any violation above, naming the offending vertices.
    """

    def __init__(self, vertices: Iterable[Vertex], edges: Iterable[Edge]) -> None:
        self._vertices: dict[str, Vertex] = {}
        for vertex in vertices:
            if not isinstance(vertex.id, str) or not vertex.id:
                raise ConfigError(f"job graph: vertex id must be a non-empty string, got {vertex.id!r}")
            if vertex.id in self._vertices:
                raise ConfigError(f"job graph: duplicate vertex id {vertex.id!r}")
            if not isinstance(vertex.parallelism, int) or vertex.parallelism < 1:
                raise ConfigError(
                    f"job graph: vertex {vertex.id!r} needs parallelism >= 1, got {vertex.parallelism!r}"
                )
            self._vertices[vertex.id] = vertex
        self._inputs: dict[str, list[Edge]] = {vid: [] for vid in self._vertices}
        self._outputs: dict[str, list[Edge]] = {vid: [] for vid in self._vertices}
        seen: set[tuple[str, str]] = set()
        for edge in edges:
            for end in (edge.source, edge.target):
                if end not in self._vertices:
                    raise ConfigError(
                        f"job graph: edge {edge.source!r} -> {edge.target!r}: unknown vertex {end!r}"
                    )
            if (edge.source, edge.target) in seen:
                raise ConfigError(f"job graph: duplicate edge {edge.source!r} -> {edge.target!r}")
            seen.add((edge.source, edge.target))
            self._inputs[edge.target].append(edge)
            self._outputs[edge.source].append(edge)
        for vertex in self._vertices.values():
            has_inputs = bool(self._inputs[vertex.id])
            if vertex.kind is VertexKind.SOURCE and has_inputs:
                raise ConfigError(f"job graph: source {vertex.id!r} has inputs")
            if vertex.kind is not VertexKind.SOURCE and not has_inputs:
                raise ConfigError(f"job graph: {vertex.kind.value} {vertex.id!r} has no inputs")
            if vertex.kind is VertexKind.SINK and self._outputs[vertex.id]:
                raise ConfigError(f"job graph: sink {vertex.id!r} has outputs")
        self._order = self._topological_order()
        self._num_subtasks = sum(v.parallelism for v in self._vertices.values())

    def _topological_order(self) -> tuple[str, ...]:
        # Kahn's algorithm; whatever is left unordered lies on or behind a cycle.
        in_degree = {vid: len(ins) for vid, ins in self._inputs.items()}
        ready = [vid for vid, d in in_degree.items() if d == 0]
        order: list[str] = []
        while ready:
            vid = ready.pop()
            order.append(vid)
            for edge in self._outputs[vid]:
                in_degree[edge.target] -= 1
                if in_degree[edge.target] == 0:
                    ready.append(edge.target)
        if len(order) != len(self._vertices):
            stuck = sorted(vid for vid, d in in_degree.items() if d > 0)
            raise ConfigError(f"job graph: cycle through vertices {stuck}")
        return tuple(order)

    @property
    def vertices(self) -> Mapping[str, Vertex]:
        """Operators by id (read-only view)."""
        return MappingProxyType(self._vertices)

    @property
    def topological_order(self) -> tuple[str, ...]:
        """Operator ids, every edge's source before its target."""
        return self._order

    @property
    def num_subtasks(self) -> int:
        """Total number of subtasks, the sum of all parallelisms."""
        return self._num_subtasks

    def vertex(self, vertex_id: str) -> Vertex:
        """The operator ``vertex_id``; raises ConfigError if unknown."""
        try:
            return self._vertices[vertex_id]
        except KeyError:
            raise ConfigError(f"job graph: unknown vertex {vertex_id!r}") from None

    def inputs(self, vertex_id: str) -> tuple[Edge, ...]:
        """The edges into ``vertex_id``, in insertion order."""
        self.vertex(vertex_id)
        return tuple(self._inputs[vertex_id])

    def outputs(self, vertex_id: str) -> tuple[Edge, ...]:
        """The edges out of ``vertex_id``, in insertion order."""
        self.vertex(vertex_id)
        return tuple(self._outputs[vertex_id])

    def sources(self) -> tuple[str, ...]:
        """Ids of the source operators, in topological order."""
        return tuple(vid for vid in self._order if self._vertices[vid].kind is VertexKind.SOURCE)

    def sinks(self) -> tuple[str, ...]:
        """Ids of the sink operators, in topological order."""
        return tuple(vid for vid in self._order if self._vertices[vid].kind is VertexKind.SINK)

    def subtasks(self) -> Iterator[SubtaskId]:
        """Every subtask, operators in topological order, indices ascending. ``O(n)``."""
        for vid in self._order:
            for i in range(self._vertices[vid].parallelism):
                yield SubtaskId(vid, i)

    def upstream_subtasks(self, subtask: SubtaskId) -> Iterator[SubtaskId]:
        """The subtasks ``subtask`` reads from, over every input edge (ALL_TO_ALL: all of them)."""
        q = self._parallelism_of(subtask)
        for edge in self._inputs[subtask.vertex]:
            p = self._vertices[edge.source].parallelism
            indices = (
                range(p)
                if edge.pattern is DistributionPattern.ALL_TO_ALL
                else pointwise_upstream(subtask.index, p, q)
            )
            for i in indices:
                yield SubtaskId(edge.source, i)

    def subtask_edges(self) -> Iterator[tuple[SubtaskId, SubtaskId]]:
        """Every subtask-level connection ``(upstream, downstream)``: ``p * q`` per ALL_TO_ALL edge.

        Quadratic in the parallelism; meant for tests, benchmarks and small graphs only.
        """
        for vid in self._order:
            for j in range(self._vertices[vid].parallelism):
                down = SubtaskId(vid, j)
                for up in self.upstream_subtasks(down):
                    yield up, down

    def _parallelism_of(self, subtask: SubtaskId) -> int:
        vertex = self._vertices.get(subtask.vertex)
        if vertex is None:
            raise ConfigError(f"job graph: subtask {subtask} names an unknown vertex")
        if not 0 <= subtask.index < vertex.parallelism:
            raise ConfigError(f"job graph: subtask {subtask} out of range, parallelism {vertex.parallelism}")
        return vertex.parallelism

    def finished_by_vertex(self, finished: Iterable[SubtaskId]) -> dict[str, frozenset[int]]:
        """Group finished subtasks by operator: ``{vertex id: finished indices}``, every vertex present.

        Raises:
            ConfigError: a subtask names an unknown vertex or an index outside ``[0, parallelism)``.
        """
        grouped: dict[str, set[int]] = {vid: set() for vid in self._vertices}
        for subtask in finished:
            self._parallelism_of(subtask)
            grouped[subtask.vertex].add(subtask.index)
        return {vid: frozenset(indices) for vid, indices in grouped.items()}

    def __repr__(self) -> str:
        edges = sum(len(v) for v in self._inputs.values())
        return f"JobGraph(vertices={len(self._vertices)}, edges={edges}, subtasks={self._num_subtasks})"


def tasks_to_trigger(graph: JobGraph, finished: Set[SubtaskId]) -> set[SubtaskId]:
    """The running subtasks that have no running predecessor: where a checkpoint is triggered.

    FLIP-147 Appendix 1 ("Computing Tasks to Trigger"), per operator ``B`` in topological order:

    1. if every subtask of B finished, nothing of B is triggered;
    2. fast check: if some input ``A -> B`` is ALL_TO_ALL and *some* subtask of A runs, or is
       POINTWISE and *all* subtasks of A run, every subtask of B has a running predecessor, so
       nothing of B is triggered (POINTWISE gives every subtask of B at least one upstream one);
    3. otherwise every ALL_TO_ALL input of B has fully finished, so only POINTWISE predecessors can
       still run: a running subtask of B is triggered iff none of its POINTWISE upstream subtasks
       runs. Inputs whose upstream operator fully finished are left out of this check.

    Only running-subtask *counts* are needed for ALL_TO_ALL inputs, so their ``p * q`` connections
    are never enumerated: ``O(n + e')`` time for ``n`` subtasks and ``e'`` POINTWISE connections.
    Running sources are always triggered (they have no inputs); with nothing finished the result is
    exactly the sources' subtasks, and with everything finished it is empty.

    Args:
        graph: the job graph.
        finished: the subtasks that have finished (any set; see the module docstring).

    Returns:
        The subtasks to trigger, a new set.

    Raises:
        ConfigError: ``finished`` names an unknown vertex or an out-of-range index.
    """
    done = graph.finished_by_vertex(finished)
    vertices = graph.vertices
    triggered: set[SubtaskId] = set()
    for vid in graph.topological_order:
        parallelism = vertices[vid].parallelism
        done_here = done[vid]
        if len(done_here) == parallelism:
            continue
        # The fast check, keeping the POINTWISE inputs that need the per-subtask check.
        to_check: list[tuple[frozenset[int], int]] = []
        has_running_predecessor = False
        for edge in graph.inputs(vid):
            up_done = done[edge.source]
            up_parallelism = vertices[edge.source].parallelism
            up_running = up_parallelism - len(up_done)
            if edge.pattern is DistributionPattern.ALL_TO_ALL:
                if up_running > 0:
                    has_running_predecessor = True
                    break
            elif not up_done:
                has_running_predecessor = True
                break
            elif up_running > 0:
                to_check.append((up_done, up_parallelism))
        if has_running_predecessor:
            continue
        for i in range(parallelism):
            if i in done_here:
                continue
            if any(
                u not in up_done
                for up_done, up_parallelism in to_check
                for u in pointwise_upstream(i, up_parallelism, parallelism)
            ):
                continue
            triggered.add(SubtaskId(vid, i))
    return triggered


def running_tasks(graph: JobGraph, finished: Set[SubtaskId]) -> set[SubtaskId]:
    """Every subtask not in ``finished``. ``O(n)``. Raises ConfigError like :func:`tasks_to_trigger`."""
    done = graph.finished_by_vertex(finished)
    return {
        SubtaskId(vid, i)
        for vid in graph.topological_order
        for i in range(graph.vertices[vid].parallelism)
        if i not in done[vid]
    }


def fully_finished_operators(graph: JobGraph, finished: Set[SubtaskId]) -> set[str]:
    """Ids of the operators all of whose subtasks have finished.

    FLIP-147 ("Checkpoint Format with Finished Tasks"): such an operator is flagged *fully
    finished* in the checkpoint and is not executed again after restore.

    Raises:
        ConfigError: like :func:`tasks_to_trigger`.
    """
    done = graph.finished_by_vertex(finished)
    return {vid for vid, v in graph.vertices.items() if len(done[vid]) == v.parallelism}


@dataclass(frozen=True)
class CheckpointPlan:
    """Who takes part in one checkpoint, given the finished subtasks (Flink's ``CheckpointPlan``).

    Attributes:
        tasks_to_trigger: running subtasks with no running predecessor; the coordinator triggers
            these, the barriers reach the rest (FLIP-147 Appendix 1).
        tasks_to_wait_for: every running subtask; each must acknowledge before the checkpoint
            completes. Finished subtasks are neither triggered nor awaited.
        tasks_to_commit_to: every running subtask; each gets ``notify_checkpoint_complete``.
        finished_tasks: the finished subtasks the plan was computed from.
        fully_finished_operators: operator ids flagged fully finished in the checkpoint.
    """

    tasks_to_trigger: frozenset[SubtaskId]
    tasks_to_wait_for: frozenset[SubtaskId]
    tasks_to_commit_to: frozenset[SubtaskId]
    finished_tasks: frozenset[SubtaskId]
    fully_finished_operators: frozenset[str]

    @property
    def all_finished(self) -> bool:
        """True when no subtask runs: nothing can be triggered and no checkpoint can be taken."""
        return not self.tasks_to_wait_for


def plan_checkpoint(graph: JobGraph, finished: Set[SubtaskId]) -> CheckpointPlan:
    """The :class:`CheckpointPlan` for ``finished``, in ``O(n + e')``.

    Raises:
        ConfigError: like :func:`tasks_to_trigger`.
    """
    running = frozenset(running_tasks(graph, finished))
    return CheckpointPlan(
        tasks_to_trigger=frozenset(tasks_to_trigger(graph, finished)),
        tasks_to_wait_for=running,
        tasks_to_commit_to=running,
        finished_tasks=frozenset(finished),
        fully_finished_operators=frozenset(fully_finished_operators(graph, finished)),
    )
