"""The chaos suite's trials: crash the flights job, restart it until it finishes, verify exactly-once.

A trial prepares a fresh flights run (own job id, topic, S3 prefix, Delta table), then runs
``python -m twophase.integration.jobs.flights --work-dir DIR`` as a subprocess (its own process group:
driver, Spark JVM and Python workers), in one of two ways:

- ``fault``: with ``TWOPHASE_FAULT=<point>:<n>`` (and ``TWOPHASE_FAULT_STATE``, so the n-th hit is
  counted across processes and fires once). Driver points make the driver exit 137; executor
  points kill a Python worker, Spark retries the task (``local[2,4]``) and the job carries on.
- ``kill``: SIGKILL to the whole process group at seeded random moments, from outside.

On a cluster (the ``cluster`` configuration, :mod:`twophase.integration.chaos.cluster`) the job is
submitted to the standalone master, executor points name what they kill (``point:n@executor``,
``point:n@worker``) and Spark's event log tells what each trial did to the executors and stages.
A ``cluster4z`` trial holds one task attempt (``point:n:pause=S``) with speculation on, maybe
beside a kill at another point (``point:n:pause=S,point:m@executor``), and runs the job through
:mod:`twophase.integration.chaos.job_with_conf` (the job's cluster conf with speculation on).

Then it restarts the job without faults until it exits 0 (FINISHED), and verifies every sink
(:func:`twophase.integration.jobs.flights_sinks.verify_run`): each record exactly once (Kafka
read_committed, S3 Parquet, Delta, PostgreSQL, Iceberg) and zero lingering transactions, pending
uploads or unreferenced files.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twophase.coordinator.state.faults import (
    ACTION_ENV,
    EXIT_STATUS,
    KILL_ENV,
    POINTS,
    STATE_ENV,
    parse_faults,
    paused_marker,
    resume_marker,
)
from twophase.coordinator.state.faults import ENV as FAULT_ENV
from twophase.integration.chaos.cluster import spark_events
from twophase.integration.chaos.job_with_conf import CONF_ENV
from twophase.integration.chaos.matrix import CONFIGS, PG_RESTART, S3_STALL, STORAGE_STALLS_S, ChaosConfig
from twophase.integration.chaos.unmarked import refusing_markers
from twophase.integration.jobs.flights import KAFKA_SECURITY_ENV, FlightsEndpoints
from twophase.integration.jobs.flights_sinks import verify_run
from twophase.integration.jobs.flights_stores import store_env
from twophase.integration.services.launcher import given_env
from twophase.integration.spark import SCRATCH_ENV
from twophase.integration.verify import VerifyReport
from twophase.sinks.errors import ServiceUnavailableError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from twophase.integration.chaos.secured import SecuredFlights
    from twophase.integration.services.postgres import PostgresServer

REPO = Path(__file__).resolve().parents[2]

DRIVER_POINTS = (
    "before_persist",
    "after_persist",
    "mid_commit",
    "after_commit",
    "during_finish",
    "during_final_checkpoint",
)
"""Driver fault points a bounded flights job reaches (stop-with-savepoint and cancel do not apply)."""
EXECUTOR_POINTS = ("before_write", "mid_write", "after_pre_commit")
"""Executor fault points: reached once per task (per partition and attempt) of every epoch."""
assert set(DRIVER_POINTS) | set(EXECUTOR_POINTS) <= POINTS


def fault_hits(point: str, tasks: list[int]) -> int:
    """How many times a fresh run reaches ``point``; ``tasks`` holds each micro-batch's subtasks.

    Every epoch and the final checkpoint persist and commit; only epochs are sure to commit several
    sinks (``mid_commit``). Executor points fire once per task.
    """
    batches = len(tasks)
    if point in ("before_persist", "after_persist", "after_commit"):
        return batches + 1
    if point == "mid_commit":
        return batches
    if point in ("during_finish", "during_final_checkpoint"):
        return 1
    if point in EXECUTOR_POINTS:
        return sum(tasks)
    raise ValueError(f"fault point {point!r} does not apply to the flights job")


def fault_matrix(tasks: list[int], kills: tuple[str, ...] = ("",), driver: bool = True) -> list[str]:
    """Every ``point:n`` the job reaches, round-robin over the points (every point's first hit,
    then every point's second, ...), so that a run cut short still covers every point. Executor
    points come once per entry of ``kills`` (``point:n@kill``: what the fault kills, see
    :data:`~twophase.coordinator.state.faults.KILLS`; ``""``: the Python worker only). Without ``driver``,
    executor points only."""
    points = [(p, "") for p in DRIVER_POINTS if driver] + [(p, k) for p in EXECUTOR_POINTS for k in kills]
    rounds = max(fault_hits(p, tasks) for p, _ in points)
    return [
        f"{p}:{n}" + (f"@{k}" if k else "")
        for n in range(1, rounds + 1)
        for p, k in points
        if n <= fault_hits(p, tasks)
    ]


def config_matrix(config: ChaosConfig, days: int, files_per_trigger: int) -> list[str]:
    """The fault matrix of ``config``'s runs: its PostgreSQL restarts first (``point:n+pg-restart``),
    its storage stalls (``point:n+s3-stall:S``), then :func:`fault_matrix` of its subtasks and kills."""
    tasks = config.tasks_per_batch(days, files_per_trigger)
    restarts = [f"{point}+{PG_RESTART}" for point in config.pg_restarts]
    stalls = [f"{point}+{S3_STALL}:{s:g}" for point in config.storage_stalls for s in STORAGE_STALLS_S]
    return restarts + stalls + fault_matrix(tasks, config.executor_kills, config.driver_faults)


@dataclass(frozen=True)
class TrialPlan:
    """One trial.

    Attributes:
        index: the trial's number (0-based).
        kind: ``fault``, ``kill`` or ``plain`` (no crash: measures how long a run takes).
        fault: ``point:n`` for a fault trial.
        kill_after_s: for a kill trial, seconds after each start at which to SIGKILL, one per kill.
        kill_at: for a kill trial planned before the run length is known: fractions of the
            configuration's measured run length; the runner turns them into ``kill_after_s``.
        config: the :class:`~twophase.integration.chaos.matrix.ChaosConfig` name.
        rerun: 0, or how many times a kill trial was run again because the job finished before
            its kill moment (each run has its own job id, topic and prefixes).
    """

    index: int
    kind: str
    fault: str | None = None
    kill_after_s: tuple[float, ...] = ()
    kill_at: tuple[float, ...] = ()
    config: str = "parquet"
    rerun: int = 0

    @property
    def label(self) -> str:
        """A short description."""
        if self.kind == "fault":
            return f"fault {self.fault}"
        if self.kind == "plain":
            return "plain run (measures the run)"
        if self.kill_after_s:
            return "kill -9 at " + ", ".join(f"{t:.1f}s" for t in self.kill_after_s)
        return "kill -9 at " + ", ".join(f"{f:.0%}" for f in self.kill_at) + " of a run"


def plan_trials(
    trials: int,
    tasks: list[int],
    seed: int,
    kill_share: float = 0.25,
    kill_window_s: tuple[float, float] = (4.0, 30.0),
) -> list[TrialPlan]:
    """``trials`` trials: the fault matrix in order (repeated as needed) with every
    ``round(1 / kill_share)``-th trial a kill trial (1 or 2 kills at seeded random moments)."""
    rng = random.Random(seed)
    matrix = fault_matrix(tasks)
    every = max(1, round(1 / kill_share)) if kill_share > 0 else 0
    plans: list[TrialPlan] = []
    k = 0
    for i in range(trials):
        if every and i % every == every - 1:
            kills = tuple(round(rng.uniform(*kill_window_s), 1) for _ in range(rng.choice((1, 1, 2))))
            plans.append(TrialPlan(i, "kill", kill_after_s=kills))
        else:
            plans.append(TrialPlan(i, "fault", fault=matrix[k % len(matrix)]))
            k += 1
    return plans


def plan_matrix(
    trials: int,
    configs: list[ChaosConfig],
    days: int,
    files_per_trigger: int,
    seed: int,
    kill_share: float = 0.25,
) -> list[TrialPlan]:
    """``trials`` trials over ``configs``, round-robin (so a run cut short covers every one).

    Each configuration starts with a plain run that measures its length (later runs that end
    uncrashed lower it to the shortest seen); then its fault matrix in
    order, with every ``round(1 / kill_share)``-th trial a kill trial whose moment is a seeded
    fraction (15–85 %) of the measured length, so that every kill lands while the job runs.
    A configuration with zombie pauses has neither: every trial of it holds an attempt
    (:func:`zombie_fault`).
    """
    rng = random.Random(seed)
    zombie_rngs = {c.name: random.Random(f"{seed}/{c.name}") for c in configs if c.zombie_pauses_s}
    every = max(1, round(1 / kill_share)) if kill_share > 0 else 0
    matrices = {c.name: config_matrix(c, days, files_per_trigger) for c in configs}
    seen = {c.name: 0 for c in configs}
    faults = {c.name: 0 for c in configs}
    plans: list[TrialPlan] = []
    for i in range(trials):
        c = configs[i % len(configs)]
        j = seen[c.name]
        seen[c.name] += 1
        if c.zombie_pauses_s:
            m = matrices[c.name]
            kill = m[faults[c.name] % len(m)] if j % 2 else None
            faults[c.name] += int(kill is not None)
            tasks = c.tasks_per_batch(days, files_per_trigger)
            fault = zombie_fault(j, tasks, c.zombie_pauses_s, zombie_rngs[c.name], kill)
            plans.append(TrialPlan(i, "fault", fault=fault, config=c.name))
        elif j == 0:
            plans.append(TrialPlan(i, "plain", config=c.name))
        elif every and j % every == 0:
            plans.append(TrialPlan(i, "kill", kill_at=(round(rng.uniform(0.15, 0.85), 2),), config=c.name))
        else:
            m = matrices[c.name]
            plans.append(TrialPlan(i, "fault", fault=m[faults[c.name] % len(m)], config=c.name))
            faults[c.name] += 1
    return plans


def zombie_fault(
    j: int, tasks: list[int], pauses_s: tuple[float, ...], rng: random.Random, kill: str | None = None
) -> str:
    """The faults of a configuration's ``j``-th zombie trial: hold the ``n``-th arrival at an
    executor point (round-robin over :data:`EXECUTOR_POINTS`; ``n`` drawn by ``rng`` from the
    run's task attempts, so any partition of any epoch) for a pause drawn from ``pauses_s``
    (``point:n:pause=S``), and with ``kill`` (``point:n@what``, from the kill matrix) also kill an
    executor or worker; at another point, since a point has one entry in ``TWOPHASE_FAULT``."""
    point = EXECUTOR_POINTS[j % len(EXECUTOR_POINTS)]
    if kill is not None and kill.split(":")[0] == point:
        point = EXECUTOR_POINTS[(j + 1) % len(EXECUTOR_POINTS)]
    pause = f"{point}:{rng.randint(1, sum(tasks))}:pause={rng.choice(pauses_s):g}"
    return pause if kill is None else f"{pause},{kill}"


def fault_reached(fault: str, state_dir: Path, exit_code: int, driver_exits: bool = True) -> bool:
    """Every fault of ``fault`` (``TWOPHASE_FAULT``'s value, no ``@kill``) fired: a driver point
    made the process exit 137, an executor point recorded its hit in ``state_dir``, a timed pause
    left its marker there. Without ``driver_exits`` (a driver YARN starts again, whose submitting
    process ends with the application's status) a driver point's hit is read from ``state_dir`` too."""
    for point, (hit, pause) in parse_faults(fault).items():
        if pause is not None:
            reached = paused_marker(state_dir, point, hit).exists()
        elif point in DRIVER_POINTS and driver_exits:
            reached = exit_code == EXIT_STATUS
        else:
            reached = (state_dir / f"{point}.{hit}").exists()
        if not reached:
            return False
    return True


@dataclass
class TrialResult:
    """What one trial did and found.

    Attributes:
        plan: the trial.
        job_id: its flights job id.
        exit_codes: of every process run, in order.
        kills: SIGKILLs sent.
        fault_fired: the fault made a process exit 137 (driver) or was recorded (executor).
        restarts: process runs after the first.
        report: the verification, if it ran.
        violations: what broke exactly-once or left lingering state (empty: the trial passed).
        seconds: the trial's wall time.
        first_run_s: the wall time of the trial's first process run (or of its kills' runs).
        events: on a cluster, :func:`~twophase.integration.chaos.cluster.spark_events` of its runs.
        doubt: what its driver's log shows of the paths where an outcome was in doubt
            (:func:`doubt_evidence`), if any.
        fenced: driver runs that ended fenced by a newer driver (exit status 1 allowed for them).
        refused: driver runs whose streaming query Spark refused to start because another
            driver's query of the same Spark checkpoint was creating its metadata at that moment
            (``SparkConcurrentModificationException``; exit status 1 allowed for them too).
    """

    plan: TrialPlan
    job_id: str
    exit_codes: list[int] = field(default_factory=list)
    kills: int = 0
    fault_fired: bool = False
    restarts: int = 0
    report: VerifyReport | None = None
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0
    first_run_s: float = 0.0
    events: dict[str, int] = field(default_factory=dict)
    doubt: dict[str, int] = field(default_factory=dict)
    fenced: int = 0
    refused: int = 0

    @property
    def passed(self) -> bool:
        """No violation."""
        return not self.violations


def service_env(endpoints: FlightsEndpoints) -> dict[str, str]:
    """Environment variables that point a job process at ``endpoints`` (with secured services
    also its Kafka login, ``TWOPHASE_KAFKA_SECURITY``, and ``AWS_CA_BUNDLE``: secrets stay in the
    job process's environment; with Azurite, ``TWOPHASE_AZURE_CONNECTION_STRING``; with
    fake-gcs-server, ``TWOPHASE_GCS_ENDPOINT``)."""
    env = given_env(endpoints.kafka_bootstrap, endpoints.s3)
    if endpoints.kafka_security:
        env[KAFKA_SECURITY_ENV] = json.dumps(dict(endpoints.kafka_security))
    if endpoints.ca_bundle:
        env["AWS_CA_BUNDLE"] = endpoints.ca_bundle
    # the stores' emulators (the Azure connection string holds the account key: environment only)
    env |= store_env(endpoints)
    if "postgres" in endpoints.extra:
        from twophase.integration.services.postgres_service import DSN_ENV, postgres_dsn

        env[DSN_ENV] = postgres_dsn(endpoints.extra["postgres"])
    return env


#: How long one run of a trial may take before it is killed from outside as hung (exit ``-999``,
#: the trial fails). Slow but live runs took over 600 s on the loaded 2-core machine: a YARN
#: submission's two driver attempts, each localizing the ~210 MB environment and starting three
#: JVMs (up to 10 minutes), and a ``--store gcs`` restart whose SparkContext took 7 minutes to
#: start at load 10 (gcs trial 2, stop 56: killed as hung at 600 s, its sinks exact). A hung run
#: still fails, later.
RUN_TIMEOUT_S = 1800.0


def run_job_process(
    work_dir: Path,
    endpoints: FlightsEndpoints,
    log_path: Path,
    fault: str | None = None,
    fault_state: Path | None = None,
    kill_after_s: float | None = None,
    timeout_s: float | None = None,
    master: str | None = None,
    fault_kill: str = "",
    fault_action: str = "",
    spark_conf: tuple[tuple[str, str], ...] = (),
    yarn: bool = False,
) -> tuple[int, bool]:
    """Run the flights job of ``work_dir`` once in its own process group; on the standalone
    cluster ``master`` when given, with Spark's event log in ``<work_dir>/spark-events``.
    ``fault_kill``: what an executor-side fault kills (``TWOPHASE_FAULT_KILL``); ``fault_action``:
    ``pause`` to hold at the fault point instead (``TWOPHASE_FAULT_ACTION``); ``spark_conf``:
    further Spark settings of a cluster run (through
    :mod:`~twophase.integration.chaos.job_with_conf`); ``yarn``: submit it to YARN in cluster mode
    (:mod:`~twophase.integration.jobs.flights_yarn`, the cluster of ``TWOPHASE_YARN_CONF_DIR``),
    where a kill moment kills the driver's container, not this process group, and the wait goes on
    (a submission waits for every attempt of its application). A run still going after
    ``timeout_s`` (:data:`RUN_TIMEOUT_S` unless given) is killed as hung and returns ``-999``.

    Returns:
        (exit status — negative for a signal —, whether this call sent SIGKILL).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(FAULT_ENV)}
    env.update(service_env(endpoints))
    env["PYSPARK_PYTHON"] = sys.executable
    env[SCRATCH_ENV] = str(work_dir / "spark-scratch")  # what a killed driver leaves goes with the trial
    if fault is not None:
        env[FAULT_ENV] = fault
        env[STATE_ENV] = str(fault_state or work_dir / "fault-state")
    if fault_kill:
        env[KILL_ENV] = fault_kill
    if fault_action:
        env[ACTION_ENV] = fault_action
    on_cluster = ("--master", master, "--event-log-dir", str(work_dir / "spark-events")) if master else ()
    module = "twophase.integration.jobs.flights"
    if spark_conf and master:
        env[CONF_ENV] = json.dumps(dict(spark_conf))
        module = "twophase.integration.chaos.job_with_conf"
    command = [sys.executable, "-m", module, "--work-dir", str(work_dir), *on_cluster]
    if yarn:
        command = [sys.executable, "-m", YARN_JOB, "submit", "--work-dir", str(work_dir)]
        command += ["--deploy-mode", "cluster", "--event-log-dir", str(work_dir / "spark-events")]
    timeout_s = RUN_TIMEOUT_S if timeout_s is None else timeout_s
    with log_path.open("ab") as log:
        log.write(f"\n=== run fault={fault} kill_after_s={kill_after_s} ===\n".encode())
        log.flush()
        proc = subprocess.Popen(
            command,
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=log,
            start_new_session=True,  # its own process group: driver, JVM and workers die together
        )
        killed = False
        if yarn and kill_after_s is not None:
            killed = kill_driver_container(proc, work_dir, kill_after_s)
            kill_after_s = None  # YARN starts the driver again: wait for the application's end
        try:
            proc.wait(timeout=kill_after_s if kill_after_s is not None else timeout_s)
        except subprocess.TimeoutExpired:
            # a kill trial's moment, or a hung run: kill -9 the whole group from outside
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            if kill_after_s is None:
                return -999, killed
            killed = True
        return proc.returncode, killed


YARN_JOB = "twophase.integration.jobs.flights_yarn"


def kill_driver_container(proc: subprocess.Popen[bytes], work_dir: Path, after_s: float) -> bool:
    """``after_s`` seconds after ``proc`` (a spark-submit of the run in ``work_dir``, cluster mode)
    started, SIGKILL its driver's container (the application master whose arguments name
    ``work_dir``). Returns whether one was killed (not when the job ended first, or its driver
    had not started yet)."""
    from twophase.integration.services.yarn import application_masters, kill_container_of

    try:
        proc.wait(timeout=after_s)
        return False
    except subprocess.TimeoutExpired:
        pass
    drivers = application_masters(str(work_dir))
    for pid in drivers:
        kill_container_of(pid)
    return bool(drivers)


def run_trial(
    plan: TrialPlan,
    base: Path,
    endpoints: FlightsEndpoints | None,
    spark: SparkSession | None,
    days: int,
    files_per_trigger: int,
    run_id: str,
    max_restarts: int = 6,
    keep: bool = False,
    master: str | None = None,
    secured: SecuredFlights | None = None,
    postgres: PostgresServer | None = None,
    own_kafka: Mapping[str, str] | None = None,
) -> TrialResult:
    """Run one trial (see the module docstring) in its configuration and verify the outcome; a
    cluster configuration's on the standalone cluster ``master``, a secured one against
    ``secured`` (the job writes with its least-privilege credentials, other principals read back
    and list lingering state, Delta is read with deltalake). A ``point:n+pg-restart`` trial holds
    the job at the point and restarts ``postgres`` there (:func:`restart_when_paused`). A
    configuration with broker settings writes to its broker in ``own_kafka`` (configuration name →
    bootstrap); one with ``down_s`` keeps the driver down that long after every crash."""
    started = time.perf_counter()
    job_id = f"chaos_{run_id}_{plan.index:03d}" + (f"r{plan.rerun}" if plan.rerun else "")
    work_dir = base / job_id
    config = CONFIGS[plan.config]
    if config.cluster and master is None:
        raise ValueError(f"chaos configuration {config.name!r} runs on a cluster: no master given")
    if (plan.fault or "").endswith(f"+{PG_RESTART}") and postgres is None:
        raise ValueError(f"trial {plan.label} needs the PostgreSQL server to restart")
    spec = config.spec(job_id, work_dir, days, files_per_trigger)
    spec.save()
    admin: FlightsEndpoints | None = None
    if config.secured:
        if secured is None:
            raise ValueError(f"chaos configuration {config.name!r} needs the secured services")
        endpoints, reader, admin, spark = secured.prepare(spec), secured.reader(), secured.admin(), None
    elif endpoints is None:
        raise ValueError(f"chaos configuration {config.name!r} needs the plain services' endpoints")
    else:
        if config.kafka_settings:
            bootstrap = (own_kafka or {}).get(config.name)
            if bootstrap is None:
                raise ValueError(f"chaos configuration {config.name!r} needs a Kafka broker of its own")
            endpoints = replace(endpoints, kafka_bootstrap=bootstrap)
        reader = endpoints
        if config.refuse_markers:  # the job's keys may write no committed marker; the reader's may
            endpoints = replace(endpoints, s3=refusing_markers(reader.s3, spec.checkpoint_uri))
    run = functools.partial(
        run_job_process,
        work_dir,
        endpoints,
        work_dir / "job.log",
        master=master if config.cluster else None,
        spark_conf=config.spark_conf,
        yarn=config.yarn,
    )
    result = TrialResult(plan, job_id)

    def restart(**kwargs: Any) -> tuple[int, bool]:
        time.sleep(config.down_s)  # the driver stays down (past the broker's id expiration)
        return run(**kwargs)

    second = SecondDriver(
        functools.partial(
            run_job_process,
            work_dir,
            endpoints,
            work_dir / "job-2.log",
            master=master if config.cluster else None,
            spark_conf=config.spark_conf,
            yarn=config.yarn,
        ),
        config.second_driver_s[plan.index % len(config.second_driver_s)] if config.second_driver_s else None,
    )
    if plan.kind == "plain":
        code, _ = run()
        result.exit_codes.append(code)
    elif plan.kind == "fault" and plan.fault is not None and plan.fault.endswith(f"+{PG_RESTART}"):
        assert postgres is not None
        fault = plan.fault.removesuffix(f"+{PG_RESTART}")
        point, _, hit = fault.partition(":")
        with restart_when_paused(postgres, work_dir / "fault-state", point, int(hit or 1)) as restarted:
            code, _ = run(fault=fault, fault_action="pause")
        result.exit_codes.append(code)
        result.fault_fired = restarted.is_set()
    elif plan.kind == "fault" and plan.fault is not None and f"+{S3_STALL}:" in plan.fault:
        fault, _, stall = plan.fault.partition(f"+{S3_STALL}:")
        point, _, hit = fault.partition(":")
        minio = minio_pid(reader.s3.endpoint_url)
        with stall_storage_when_paused(
            minio, work_dir / "fault-state", point, int(hit or 1), float(stall)
        ) as stalled:
            code, _ = run(fault=fault, fault_action="pause")
        result.exit_codes.append(code)
        result.fault_fired = stalled.is_set()
    elif plan.kind == "fault":
        assert plan.fault is not None
        fault, _, kill = plan.fault.partition("@")
        code, _ = run(fault=fault, fault_kill=kill)
        result.exit_codes.append(code)
        result.fault_fired = fault_reached(fault, work_dir / "fault-state", code, not config.yarn)
    else:
        for i, delay in enumerate(plan.kill_after_s):
            code, killed = (restart if i else run)(kill_after_s=delay)
            result.exit_codes.append(code)
            result.kills += int(killed)
            if code == 0:
                break
    result.exit_codes.extend(second.join())
    result.fenced = fenced_drivers(work_dir)
    result.refused = refused_drivers(work_dir)
    result.first_run_s = time.perf_counter() - started
    while (not result.exit_codes or result.exit_codes[-1] != 0) and len(result.exit_codes) <= max_restarts:
        code, _ = restart()
        result.exit_codes.append(code)
    result.restarts = len(result.exit_codes) - 1
    if result.exit_codes[-1] != 0:
        result.violations.append(f"job did not finish after {result.restarts} restarts: {result.exit_codes}")
    result.doubt = doubt_evidence(work_dir / "job.log")
    if config.yarn:
        result.events = {"driver_attempts": yarn_attempts(work_dir / "job.log")}
    if config.cluster:
        result.events = spark_events(work_dir / "spark-events")
        if plan.kind == "fault" and "@" in (plan.fault or "") and not result.events["executors_lost"]:
            result.fault_fired = False  # the point was reached but no executor was lost
    if plan.kind == "fault" and not result.fault_fired and not (config.second_driver_s and result.fenced):
        # a two-drivers trial's faulted driver may be fenced before it reaches the point
        result.violations.append(f"fault {plan.fault} never fired")
    exits_of_1 = result.exit_codes.count(1)  # allowed once per fenced or Spark-refused run
    if exits_of_1 > result.fenced + result.refused or any(
        c not in (0, 1, EXIT_STATUS, -signal.SIGKILL) for c in result.exit_codes
    ):
        result.violations.append(
            f"unexpected exit status in {result.exit_codes} ({result.fenced} fenced, "
            f"{result.refused} refused by Spark)"
        )
    report = verify_run(spec, reader, spark, admin=admin)
    result.report = report
    for s in report.sinks:
        if s.error is not None:
            result.violations.append(f"{s.sink}: {s.error}")
            continue
        if not s.exactly_once:
            result.violations.append(
                f"{s.sink}: {s.records} records, {s.duplicates} duplicated, {s.missing} missing, "
                f"{s.unexpected} unexpected, content {'ok' if s.content_ok else 'differs'}"
            )
        if s.lingering:
            result.violations.append(f"{s.sink}: lingering {s.lingering_detail}")
    if not report.checkpoint_ok:
        result.violations.append(f"job not finished: {report.checkpoint_detail}")
    result.seconds = time.perf_counter() - started
    if result.passed and not keep:
        shutil.rmtree(work_dir, ignore_errors=True)
    return result


def run_trials(
    plans: Iterable[TrialPlan],
    base: Path,
    endpoints: FlightsEndpoints | None,
    spark: SparkSession | None,
    days: int,
    files_per_trigger: int,
    on_result: Callable[[TrialResult], None] | None = None,
    deadline: float | None = None,
    max_reruns: int = 2,
    master: str | None = None,
    secured: SecuredFlights | None = None,
    postgres: PostgresServer | None = None,
    own_kafka: Mapping[str, str] | None = None,
    run_lengths: Mapping[str, float] | None = None,
) -> list[TrialResult]:
    """Run trials in order (stopping early at ``deadline``, a ``time.monotonic()`` value); the
    plain services' trials against ``endpoints``, the secured ones' against ``secured``, those
    with broker settings against their broker in ``own_kafka``.

    Kill moments are fractions of each configuration's measured run length: its shortest
    uncrashed run so far, starting from ``run_lengths`` (configuration → seconds, as an earlier
    run of the same plan measured them: a run continued with ``--first-trial`` then kills where
    the whole run would have; a configuration with none assumes 30 s until it is measured).
    A kill trial whose job finished before its kill moment sent no kill: it is reported as the
    plain run it was, its length becomes the configuration's measured length, and the kill trial
    runs again (at most ``max_reruns`` times, with fresh names) so that every kill lands.
    """
    run_id = uuid.uuid4().hex[:8]
    results: list[TrialResult] = []
    measured: dict[str, float] = dict(run_lengths or {})  # each configuration's run length
    for planned in plans:
        plan = planned
        for _ in range(max_reruns + 1):
            if deadline is not None and time.monotonic() > deadline:
                return results
            if plan.kind == "kill" and (plan.rerun or not planned.kill_after_s):
                plan = replace(plan, kill_after_s=kill_moments(plan, measured.get(plan.config)))
            result = run_trial(
                plan,
                base,
                endpoints,
                spark,
                days,
                files_per_trigger,
                run_id,
                master=master,
                secured=secured,
                postgres=postgres,
                own_kafka=own_kafka,
            )
            if result.exit_codes[:1] == [0]:  # the shortest uncrashed run: kills must land before it ends
                known = measured.get(plan.config)
                measured[plan.config] = (
                    result.first_run_s if known is None else min(known, result.first_run_s)
                )
            missed = plan.kind == "kill" and result.kills == 0 and result.exit_codes[:1] == [0]
            if missed:
                result.plan = replace(plan, kind="plain", kill_after_s=(), kill_at=())
            results.append(result)
            if on_result is not None:
                on_result(result)
            if not missed:
                break
            plan = replace(planned, rerun=plan.rerun + 1)
    return results


DOUBT_EVENTS = {
    "marker_refused": re.compile(r"committed marker not written"),
    "searched": re.compile(r"transaction marker searched"),
    "commit_found": re.compile(r"transaction marker searched .*found=True"),
    "s3_retries": re.compile(r"retrying S3 call"),
    "own_put_read_back": re.compile(r"our own write had landed"),
    "publish_unknown": re.compile(r"checkpoint publish outcome unknown"),
}
"""What :func:`doubt_evidence` counts: its name → the driver's log line it looks for: committed
markers the storage refused (the ``unmarked`` configuration, #43); Kafka marker
searches where the coordinator had forgotten an id, and those that found COMMIT (#26 item 2); S3
calls retried, a conditional PUT whose retry found our own write (read back), a publish of
unknown outcome (#26 item 1)."""


def doubt_evidence(log: Path) -> dict[str, int]:
    """How often the driver's log ``log`` shows each event of :data:`DOUBT_EVENTS`; only those seen."""
    if not log.exists():
        return {}
    counts = dict.fromkeys(DOUBT_EVENTS, 0)
    with log.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            for name, pattern in DOUBT_EVENTS.items():
                counts[name] += pattern.search(line) is not None
    return {name: n for name, n in counts.items() if n}


class SecondDriver:
    """A second driver of a trial's job, started ``after_s`` seconds after the first (a YARN
    application-master retry while the old one runs; ``None``: none), on a thread of its own.

    Args:
        run: runs the job once (as :func:`run_job_process`); returns (exit status, killed).
        after_s: the delay, seconds, or ``None``.
    """

    def __init__(self, run: Callable[[], tuple[int, bool]], after_s: float | None) -> None:
        self._codes: list[int] = []
        self._thread: threading.Thread | None = None
        if after_s is not None:
            self._thread = threading.Thread(target=self._main, args=(run, after_s), daemon=True)
            self._thread.start()

    def _main(self, run: Callable[[], tuple[int, bool]], after_s: float) -> None:
        time.sleep(after_s)
        try:
            self._codes.append(run()[0])
        except Exception as e:  # no second driver ran: the trial must not pass as if one had
            self.error = e

    error: Exception | None = None
    """What kept the second driver from running, if anything."""

    def join(self) -> list[int]:
        """Wait for it to end; its exit status (none if there was no second driver).

        Raises:
            RuntimeError: the second driver could not be run.
        """
        if self._thread is not None:
            self._thread.join()
        if self.error is not None:
            raise RuntimeError(f"the second driver did not run: {self.error!r}") from self.error
        return self._codes


FENCED = re.compile(rb"DriverFencedError: driver epoch \d+ of job")


SPARK_REFUSED = re.compile(
    rb"SparkConcurrentModificationException: Multiple streaming queries are concurrently"
)


def fenced_drivers(work_dir: Path) -> int:
    """How many driver runs of a trial a newer driver fenced (their output shows DriverFencedError)."""
    return _runs_showing(work_dir, FENCED)


def refused_drivers(work_dir: Path) -> int:
    """How many driver runs of a trial Spark refused to start a query in: two drivers started their
    queries of one Spark checkpoint at the same moment and the other created its metadata file
    first (Spark's own guard; the run never wrote, and a restart continues)."""
    return _runs_showing(work_dir, SPARK_REFUSED)


def _runs_showing(work_dir: Path, pattern: re.Pattern[bytes]) -> int:
    """How many driver runs (``=== run`` sections of the trial's job logs) show ``pattern``."""
    count = 0
    for log in (work_dir / "job.log", work_dir / "job-2.log"):
        if log.exists():
            for run in log.read_bytes().split(b"\n=== run ")[1:]:
                count += pattern.search(run) is not None
    return count


def yarn_attempts(log: Path) -> int:
    """How many drivers YARN started over a trial's submissions: the attempts of each run's
    application, from the outcome line :mod:`~twophase.integration.jobs.flights_yarn` prints."""
    if not log.exists():
        return 0
    count = 0
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{") and '"attempts"' in line:
            with contextlib.suppress(json.JSONDecodeError):
                count += len(json.loads(line).get("attempts", []))
    return count


def kill_moments(plan: TrialPlan, length_s: float | None) -> tuple[float, ...]:
    """Seconds after each start at which a kill trial sends SIGKILL: its fractions of the
    configuration's measured run length (``None``: not measured yet, 30 s is assumed)."""
    length = 30.0 if length_s is None else length_s
    return tuple(round(f * length, 1) for f in (plan.kill_at or (0.5,)))


def minio_pid(endpoint_url: str) -> int:
    """The pid of the MinIO server listening at ``endpoint_url`` (its ``--address``), from /proc.

    Raises:
        ServiceUnavailableError: no such process (the run's MinIO is not one this machine started).
    """
    address = endpoint_url.split("://", 1)[-1].rstrip("/")
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"minio") and b"--address" in argv and address.encode() in argv:
            return int(cmdline.parent.name)
    raise ServiceUnavailableError(
        f"no MinIO process listens at {address}; a storage stall needs a native one"
    )


@contextlib.contextmanager
def when_paused(
    state_dir: Path, point: str, hit: int, act: Callable[[threading.Event], None], timeout_s: float = 900.0
) -> Iterator[threading.Event]:
    """While the block runs, wait (on a thread of its own) for a job process to hold at
    ``point``'s ``hit``-th arrival (:func:`~twophase.coordinator.state.faults.paused_marker`), then call
    ``act(ended)``: it lets the job go on (:func:`~twophase.coordinator.state.faults.resume_marker`) and
    does what the trial does to a service around that. ``ended`` is set when the block ends, so
    that ``act`` cuts a wait short. The event yielded is set once ``act`` returned."""
    acted, ended = threading.Event(), threading.Event()

    def watch() -> None:
        deadline = time.monotonic() + timeout_s
        while not ended.is_set() and time.monotonic() < deadline:
            if paused_marker(state_dir, point, hit).exists():
                act(ended)
                acted.set()
                return
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, name=f"when-paused-{point}", daemon=True)
    watcher.start()
    try:
        yield acted
    finally:
        ended.set()
        watcher.join()


def stall_storage_when_paused(
    pid: int, state_dir: Path, point: str, hit: int, stall_s: float
) -> contextlib.AbstractContextManager[threading.Event]:
    """:func:`when_paused` that stops the MinIO process ``pid`` (SIGSTOP: connections are accepted,
    nothing is answered), lets the job go on, and ``stall_s`` seconds later lets MinIO go on
    (SIGCONT); sooner if the block ends first. MinIO is never left stopped."""

    def stall(ended: threading.Event) -> None:
        os.kill(pid, signal.SIGSTOP)
        try:
            resume_marker(state_dir, point, hit).touch()
            ended.wait(stall_s)
        finally:
            os.kill(pid, signal.SIGCONT)

    return when_paused(state_dir, point, hit, stall)


def restart_when_paused(
    postgres: PostgresServer, state_dir: Path, point: str, hit: int, delay_s: float = 0.02
) -> contextlib.AbstractContextManager[threading.Event]:
    """:func:`when_paused` that lets the job go on and ``delay_s`` seconds later crashes
    ``postgres`` (``pg_ctl stop -m immediate``) and starts it again: the server dies under the
    work the process resumed (COMMIT PREPARED after ``after_persist``, a COPY after
    ``mid_write``). The event yielded is set once the server is back."""

    def restart(ended: threading.Event) -> None:
        resume_marker(state_dir, point, hit).touch()
        time.sleep(delay_s)
        postgres.restart("immediate")

    return when_paused(state_dir, point, hit, restart)
