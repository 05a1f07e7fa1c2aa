"""Benchmark: FLIP-147 Appendix 1's tasks-to-trigger on a 10^5-subtask job graph.

The graph (scale 1 = 100,000 subtasks, mixed edges)::

    src_a (20,000) --POINTWISE--> map_a (30,000) --ALL_TO_ALL--+
                                                               +--> join (10,000) --POINTWISE--> sink (10,000)
    src_b (20,000) --POINTWISE--> map_b (10,000) --ALL_TO_ALL--+

(src_a -> map_a fans out 2 -> 3, src_b -> map_b fans in 2 -> 1.)

Scenarios (finished sets):
- ``half_sources_finished``: the even-indexed subtasks of both sources finished (20,000 finished);
- ``draining``: sources, map_a and map_b all finished and the even half of join (85,000 finished);
  the ALL_TO_ALL edges into join alone have 4 * 10^8 subtask-level connections, never enumerated.

For comparison the brute-force definition (enumerate every subtask-level connection; a subtask is
triggered iff it runs and no upstream subtask runs) runs on the same shape scaled down to 10^3 and
10^4 subtasks, next to the fast algorithm on that same graph. Times are wall-clock ms of the
computation only (graph and finished set built beforehand), median of ``RUNS`` runs with min-max.

``python -m benchmarks.bench_tasks_to_trigger`` prints the result.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from functools import partial

from support.flip147_graph import (
    DistributionPattern,
    Edge,
    JobGraph,
    SubtaskId,
    Vertex,
    VertexKind,
    tasks_to_trigger,
)

RUNS = 7
BRUTE_RUNS = 5

_BASE = {"src_a": 200, "map_a": 300, "src_b": 200, "map_b": 100, "join": 100, "sink": 100}


def build_graph(scale: int) -> JobGraph:
    """The benchmark graph with ``1000 * scale`` subtasks (scale 100 = 10^5)."""
    kinds = {"src_a": VertexKind.SOURCE, "src_b": VertexKind.SOURCE, "sink": VertexKind.SINK}
    vertices = [Vertex(name, kinds.get(name, VertexKind.STAGE), p * scale) for name, p in _BASE.items()]
    pw, a2a = DistributionPattern.POINTWISE, DistributionPattern.ALL_TO_ALL
    edges = [
        Edge("src_a", "map_a", pw),
        Edge("src_b", "map_b", pw),
        Edge("map_a", "join", a2a),
        Edge("map_b", "join", a2a),
        Edge("join", "sink", pw),
    ]
    return JobGraph(vertices, edges)


def half_sources_finished(graph: JobGraph) -> set[SubtaskId]:
    """The even-indexed subtasks of both sources."""
    return {
        SubtaskId(src, i) for src in ("src_a", "src_b") for i in range(0, graph.vertices[src].parallelism, 2)
    }


def draining(graph: JobGraph) -> set[SubtaskId]:
    """Everything before join finished, and the even half of join."""
    done = {
        SubtaskId(v, i)
        for v in ("src_a", "src_b", "map_a", "map_b")
        for i in range(graph.vertices[v].parallelism)
    }
    return done | {SubtaskId("join", i) for i in range(0, graph.vertices["join"].parallelism, 2)}


def brute_force_tasks_to_trigger(graph: JobGraph, finished: set[SubtaskId]) -> set[SubtaskId]:
    """The O(n^2) definition: enumerate every subtask-level connection."""
    running = set(graph.subtasks()) - finished
    has_running_predecessor = {down for up, down in graph.subtask_edges() if up in running}
    return running - has_running_predecessor


def _time_ms(fn: Callable[[], object], runs: int) -> dict[str, float]:
    samples = []
    for _ in range(runs):
        gc.collect()
        start = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - start) / 1e6)
    return {
        "median_ms": round(statistics.median(samples), 3),
        "min_ms": round(min(samples), 3),
        "max_ms": round(max(samples), 3),
        "runs": runs,
    }


def run() -> dict[str, object]:
    """Run every scenario.

    Returns:
        ``{"subtasks": n, "scenarios (10^5 subtasks)": {scenario: timings},
        "brute force vs fast (...)": {graph size: timings}}``; times in ms.

    Raises:
        AssertionError: the fast and the brute-force results differ on a small graph.
    """
    graph = build_graph(100)
    scenarios: dict[str, object] = {}
    for name, make in (("half_sources_finished", half_sources_finished), ("draining", draining)):
        finished = make(graph)
        triggered = tasks_to_trigger(graph, finished)
        scenarios[name] = {
            "finished": len(finished),
            "triggered": len(triggered),
            **_time_ms(partial(tasks_to_trigger, graph, finished), RUNS),
        }
    comparison: dict[str, object] = {}
    for scale in (1, 10):
        small = build_graph(scale)
        finished = half_sources_finished(small)
        fast = tasks_to_trigger(small, finished)
        if fast != brute_force_tasks_to_trigger(small, finished):
            raise AssertionError(f"fast and brute-force tasks-to-trigger differ at scale {scale}")
        fast_t = _time_ms(partial(tasks_to_trigger, small, finished), RUNS)
        brute_t = _time_ms(partial(brute_force_tasks_to_trigger, small, finished), BRUTE_RUNS)
        comparison[f"{small.num_subtasks:,} subtasks"] = {
            "subtask_edges": sum(1 for _ in small.subtask_edges()),
            "fast_median_ms": fast_t["median_ms"],
            "fast_min_max_ms": f"{fast_t['min_ms']}-{fast_t['max_ms']}",
            "brute_median_ms": brute_t["median_ms"],
            "brute_min_max_ms": f"{brute_t['min_ms']}-{brute_t['max_ms']}",
            "ratio": round(brute_t["median_ms"] / fast_t["median_ms"], 1),
        }
    return {
        "subtasks": graph.num_subtasks,
        "scenarios (10^5 subtasks)": scenarios,
        "brute force vs fast (half_sources_finished)": comparison,
    }


if __name__ == "__main__":
    from benchmarks.run import print_result

    print_result("tasks_to_trigger", run())
