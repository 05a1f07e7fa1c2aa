"""The chaos matrix's planning, without services: configurations, fault hits, trial order."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from support.polling import eventually

from twophase.integration.chaos import runner
from twophase.integration.chaos.cluster import spark_events
from twophase.integration.chaos.matrix import CONFIGS, LOCAL, configs_named
from twophase.integration.chaos.report import write_report
from twophase.integration.chaos.runner import (
    DRIVER_POINTS,
    EXECUTOR_POINTS,
    TrialPlan,
    TrialResult,
    config_matrix,
    fault_hits,
    fault_matrix,
    fault_reached,
    fenced_drivers,
    plan_matrix,
    refused_drivers,
    run_trials,
    yarn_attempts,
)
from twophase.integration.jobs.flights_spec import MANIFEST, FlightsJobSpec
from twophase.sinks.errors import ConfigError


def test_partition_counts_follow_the_files_only_with_one_partition_per_file() -> None:
    assert CONFIGS["partitions"].tasks_per_batch(14, 6) == [6, 6, 2]  # the count drops in batch 3
    assert CONFIGS["parquet"].tasks_per_batch(14, 6) == [2, 2, 2]
    assert CONFIGS["parquet"].tasks_per_batch(13, 6) == [2, 2, 1]


def test_the_fault_matrix_reaches_every_point_as_often_as_a_run_does() -> None:
    tasks = [6, 6, 2]
    matrix = fault_matrix(tasks)
    assert {m.split(":")[0] for m in matrix} == {*DRIVER_POINTS, *EXECUTOR_POINTS}
    assert fault_hits("mid_write", tasks) == 14 and f"mid_write:{14}" in matrix
    assert fault_hits("after_persist", tasks) == 4  # three epochs and the final checkpoint
    assert matrix[: len(DRIVER_POINTS)] == [f"{p}:1" for p in DRIVER_POINTS]  # first hits first


def test_trials_go_round_robin_each_configuration_measured_first() -> None:
    configs = configs_named("parquet,jsonl,all")
    plans = plan_matrix(30, configs, 14, 6, seed=3, kill_share=0.25)
    assert [p.config for p in plans[:6]] == ["parquet", "jsonl", "all"] * 2
    assert [p.kind for p in plans[:3]] == ["plain"] * 3
    for name in ("parquet", "jsonl", "all"):
        mine = [p for p in plans if p.config == name]
        assert sum(p.kind == "kill" for p in mine) == 2
        assert all(0.15 <= f <= 0.85 for p in mine for f in p.kill_at)
        assert all(p.fault for p in mine if p.kind == "fault")


def test_the_cluster_configuration_kills_executors_and_workers_and_is_not_a_default() -> None:
    cluster = CONFIGS["cluster"]
    assert "cluster" not in LOCAL.split(",") and LOCAL == "parquet,jsonl,partitions,async,s3,all"
    assert cluster.tasks_per_batch(14, 6) == [2, 2, 2]  # the shuffle's partitions, whatever the files
    matrix = config_matrix(cluster, 14, 6)
    assert matrix[: len(DRIVER_POINTS)] == [f"{p}:1" for p in DRIVER_POINTS]
    assert matrix[len(DRIVER_POINTS) : len(DRIVER_POINTS) + 2] == [
        "before_write:1@executor",
        "before_write:1@worker",
    ]
    assert {m.partition("@")[2] for m in matrix if m.split(":")[0] in EXECUTOR_POINTS} == {
        "executor",
        "worker",
    }
    assert "mid_write:6@worker" in matrix and "mid_write:7@worker" not in matrix
    local = fault_matrix(CONFIGS["parquet"].tasks_per_batch(14, 6), CONFIGS["parquet"].executor_kills)
    assert not any("@" in m for m in local)


def test_the_secured_configuration_keeps_its_state_on_s3_and_is_not_a_default(tmp_path: Path) -> None:
    secured = CONFIGS["secured"]
    assert "secured" not in LOCAL.split(",") and secured.secured and not secured.cluster
    spec = secured.spec("s1", tmp_path / "w", 14, 6)
    assert spec.checkpoint_uri == "s3://twophase-flights/checkpoints/s1"
    assert spec.delta_uri == "s3://twophase-flights/delta/s1"
    assert config_matrix(secured, 14, 6) == config_matrix(CONFIGS["s3"], 14, 6)


def test_a_secured_trial_needs_the_secured_services(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs the secured services"):
        runner.run_trial(TrialPlan(0, "plain", config="secured"), tmp_path, None, None, 2, 1, "r")


def test_the_zombie_cluster_configuration_kills_executors_only() -> None:
    wide = CONFIGS["cluster4"]
    assert "cluster4" not in LOCAL.split(",") and wide.executors_per_worker == 2
    matrix = config_matrix(wide, 14, 6)
    assert matrix and all(m.split(":")[0] in EXECUTOR_POINTS and "@" in m for m in matrix)
    plans = plan_matrix(8, [wide], 14, 6, seed=1)
    assert [p.kind for p in plans] == ["plain", "fault", "fault", "fault", "kill", "fault", "fault", "fault"]
    assert plans[1].fault == "before_write:1@executor"


def test_the_speculation_configuration_holds_an_attempt_in_every_trial() -> None:
    z = CONFIGS["cluster4z"]
    assert "cluster4z" not in LOCAL.split(",") and z.speculation and not CONFIGS["cluster4"].speculation
    conf = dict(z.spark_conf)
    assert conf["spark.speculation"] == "true" and float(conf["spark.speculation.quantile"]) <= 0.5
    plans = plan_matrix(24, [z], 14, 6, seed=1)
    assert [p.kind for p in plans] == ["fault"] * 24  # no plain run, no driver kill: every trial holds
    for p in plans:
        assert p.fault is not None
        pause, *kill = p.fault.split(",")
        point, hit, seconds = pause.split(":")
        assert point in EXECUTOR_POINTS and 1 <= int(hit) <= 6  # any of the 3 epochs' 2 tasks
        assert float(seconds.removeprefix("pause=")) in z.zombie_pauses_s
        # every other trial also kills as cluster4 does, at another point
        assert len(kill) == p.index % 2
        assert all("@" in k and k.split(":")[0] != point for k in kill)
    assert {p.fault.split(":")[0] for p in plans if p.fault} == set(EXECUTOR_POINTS)
    assert plan_matrix(24, [z], 14, 6, seed=1) == plans  # the seed decides
    assert plan_matrix(24, [z], 14, 6, seed=2) != plans


def test_a_trial_fired_only_when_every_fault_of_it_did(tmp_path: Path) -> None:
    from twophase.coordinator.state.faults import paused_marker

    fault = "mid_write:5:pause=30,before_write:1"
    assert not runner.fault_reached(fault, tmp_path, 0)
    paused_marker(tmp_path, "mid_write", 5).touch()
    assert not runner.fault_reached(fault, tmp_path, 0)  # the kill's hit is not recorded
    (tmp_path / "before_write.1").touch()
    assert runner.fault_reached(fault, tmp_path, 0)
    assert runner.fault_reached("after_persist:2", tmp_path, 137)
    assert not runner.fault_reached("after_persist:2", tmp_path, 0)


def test_spark_events_count_speculative_copies_and_the_attempts_they_superseded(tmp_path: Path) -> None:
    """The shape of a recorded cluster4z log (Spark 4.2, trimmed): epoch 1's sinks' stage 6
    (reading shuffle 5) where partition 1's held attempt lost to a speculative copy and was killed;
    a map stage whose copy won too (a zombie outside the sinks' stage); a sinks' stage where a
    retry after a failure won (no zombie); and one where the copy lost."""

    def submitted(stage: int, parents: list[int], tasks: int) -> dict[str, object]:
        info = {"Stage ID": stage, "Stage Attempt ID": 0, "Number of Tasks": tasks, "Parent IDs": parents}
        return {"Event": "SparkListenerStageSubmitted", "Stage Info": info}

    def end(stage: int, task: int, index: int, reason: str, speculative: bool = False) -> dict[str, object]:
        kind = "ResultTask" if stage != 9 else "ShuffleMapTask"
        info = {"Task ID": task, "Index": index, "Attempt": int(speculative), "Speculative": speculative}
        return {
            "Event": "SparkListenerTaskEnd",
            "Stage ID": stage,
            "Stage Attempt ID": 0,
            "Task Type": kind,
            "Task End Reason": {"Reason": reason}
            | ({"Kill Reason": "another attempt succeeded"} if reason == "TaskKilled" else {}),
            "Task Info": info | {"Host": "127.0.0.1" if task % 2 else "127.0.0.2"},
        }

    events = [
        {"Event": "SparkListenerLogStart", "Spark Version": "4.2.0"},
        submitted(6, [5], 2),
        {"Event": "SparkListenerTaskStart", "Stage ID": 6, "Task Info": {"Task ID": 8, "Speculative": True}},
        end(6, 7, 1, "Success"),
        end(6, 8, 0, "Success", speculative=True),  # the copy won
        end(6, 6, 0, "TaskKilled"),  # the held attempt: a zombie of the sinks' stage
        submitted(9, [], 2),
        end(9, 11, 0, "Success"),
        end(9, 13, 1, "Success", speculative=True),
        end(9, 12, 1, "TaskKilled"),  # a zombie of a map stage
        submitted(12, [10], 2),
        end(12, 20, 0, "ExceptionFailure"),
        end(12, 22, 0, "Success"),  # a retry after a failure: no zombie
        end(12, 21, 1, "Success"),
        submitted(16, [15], 2),
        end(16, 30, 0, "Success"),
        end(16, 31, 0, "TaskKilled", speculative=True),  # a copy that lost: a zombie too
    ]
    (tmp_path / "app-20261126165003-0000").write_text("\n".join(map(json.dumps, events)) + "\n")
    (tmp_path / "app-20261126165503-0001.inprogress").write_text(json.dumps(end(6, 1, 0, "Success"))[:40])
    counts = spark_events(tmp_path)
    assert {k: v for k, v in counts.items() if v} == {
        "speculative_tasks": 3,
        "superseded_tasks": 3,
        "zombie_tasks": 3,
        "sink_zombie_tasks": 2,
    }


def test_the_cluster_run_keeps_everything_on_s3_and_shuffles(tmp_path: Path) -> None:
    spec = CONFIGS["cluster"].spec("c1", tmp_path / "w", 14, 6)
    assert spec.on_s3 and spec.shuffle_partitions == 2
    with pytest.raises(ConfigError, match="shuffle_partitions"):
        FlightsJobSpec(job_id="j", work_dir="/tmp/x", shuffle_partitions=-1)


def test_spark_events_count_lost_executors_fetch_failures_stage_retries_and_zombies(tmp_path: Path) -> None:
    def task_end(stage: int, attempt: int, reason: str) -> dict[str, object]:
        return {
            "Event": "SparkListenerTaskEnd",
            "Stage ID": stage,
            "Stage Attempt ID": attempt,
            "Task End Reason": {"Reason": reason},
        }

    events = [
        {"Event": "SparkListenerStageSubmitted", "Stage Info": {"Stage ID": 3, "Stage Attempt ID": 0}},
        task_end(3, 0, "Success"),  # before the failure: not a zombie
        {"Event": "SparkListenerExecutorRemoved", "Executor ID": "1", "Removed Reason": "worker lost"},
        task_end(3, 0, "ExecutorLostFailure"),
        task_end(3, 0, "FetchFailed"),  # the retried task: attempt 0 of stage 3 has failed
        task_end(3, 0, "Success"),  # still running when it failed: a zombie
        {"Event": "SparkListenerStageSubmitted", "Stage Info": {"Stage ID": 3, "Stage Attempt ID": 1}},
        task_end(3, 1, "Success"),
    ]
    (tmp_path / "app-1.inprogress").write_text("\n".join(map(json.dumps, events)) + '\n{"Event": "Spark')
    assert spark_events(tmp_path) == {
        "executors_lost": 1,
        "executor_lost_tasks": 1,
        "fetch_failures": 1,
        "stage_retries": 1,
        "speculative_tasks": 0,
        "superseded_tasks": 0,
        "zombie_tasks": 1,
        "sink_zombie_tasks": 0,
    }
    assert spark_events(tmp_path / "none") == dict.fromkeys(spark_events(tmp_path), 0)


def test_unknown_configurations_are_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="'jsonl2'"):
        configs_named("parquet,jsonl2")


def test_a_configuration_sets_the_run_and_the_manifest_keeps_it(tmp_path: Path) -> None:
    spec = CONFIGS["all"].spec("j1", tmp_path / "w", 14, 6)
    assert spec.checkpoint_dir == f"s3://{spec.bucket}/checkpoints/j1"
    assert spec.delta_uri == f"s3://{spec.bucket}/delta/j1"
    assert (spec.s3_format, spec.async_commit, spec.partition_per_file) == ("jsonl", True, True)
    spec.save()
    assert FlightsJobSpec.load(spec.work_dir) == spec


def test_a_manifest_of_an_earlier_run_still_loads_with_the_main_path(tmp_path: Path) -> None:
    body = {"format": "twophase.flights-job", "version": 1, "job_id": "old", "work_dir": str(tmp_path)}
    (tmp_path / MANIFEST).write_text(json.dumps(body))
    spec = FlightsJobSpec.load(tmp_path)
    assert (spec.s3_format, spec.async_commit, spec.checkpoint_uri, spec.partition_per_file) == (
        "parquet",
        False,
        "",
        False,
    )
    assert spec.checkpoint_dir == str(tmp_path / "checkpoints")


def test_bad_settings_are_refused_before_a_run() -> None:
    with pytest.raises(ConfigError, match="s3_format"):
        FlightsJobSpec(job_id="j", work_dir="/tmp/x", s3_format="avro")
    with pytest.raises(ConfigError, match="checkpoint_uri"):
        FlightsJobSpec(job_id="j", work_dir="/tmp/x", checkpoint_uri="/local/path")


def test_the_report_is_written_into_a_folder_a_fresh_clone_lacks(tmp_path: Path) -> None:
    """A 45-minute run lost its report: build/ did not exist in the clean clone."""
    report = tmp_path / "build" / "chaos-report.md"
    write_report(report, [], {"trials": 0})
    assert report.read_text().startswith("# Chaos report")


def test_a_kill_that_missed_the_run_counts_as_a_plain_run_and_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 2026-11-25 run sent 5 of 6 kills: one job finished before its kill moment."""
    ran: list[TrialPlan] = []

    def fake_run_trial(plan: TrialPlan, *_: object, **__: object) -> TrialResult:
        ran.append(plan)
        result = TrialResult(plan, f"job{plan.index}r{plan.rerun}", first_run_s=20.0)
        landed = plan.kind == "kill" and max(plan.kill_after_s) < 20.0
        result.exit_codes = [-9, 0] if landed else [0]
        result.kills = int(landed)
        return result

    monkeypatch.setattr(runner, "run_trial", fake_run_trial)
    # no plain run before it (a continued run): the kill is drawn from 30 s and misses a 20 s run
    results = run_trials([TrialPlan(7, "kill", kill_at=(0.8,))], tmp_path, None, None, 14, 6)
    assert [r.plan.kind for r in results] == ["plain", "kill"]
    assert [r.plan.rerun for r in results] == [0, 1]
    assert ran[1].kill_after_s == (16.0,)  # 80 % of the 20 s it just measured
    assert results[1].kills == 1


def test_a_continued_run_kills_at_the_fractions_of_the_length_an_earlier_run_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The azure trials continued with --first-trial 3 would have killed at 77 % of an assumed
    30 s (during the session's start) instead of 77 % of trial 0's 218 s."""
    ran: list[TrialPlan] = []

    def fake_run_trial(plan: TrialPlan, *_: object, **__: object) -> TrialResult:
        ran.append(plan)
        result = TrialResult(plan, f"job{plan.index}", first_run_s=150.0)
        result.exit_codes, result.kills = [-9, 0], 1
        return result

    monkeypatch.setattr(runner, "run_trial", fake_run_trial)
    plans = [TrialPlan(4, "kill", kill_at=(0.77,), config="azure")]
    run_trials(plans, tmp_path, None, None, 4, 2, run_lengths={"azure": 218.0})
    assert ran[0].kill_after_s == (167.9,)


def test_the_five_sink_configuration_restarts_postgres_first_then_walks_the_matrix() -> None:
    five = CONFIGS["five"]
    assert "five" not in LOCAL.split(",") and five.sinks[-2:] == ("postgres", "iceberg")
    matrix = config_matrix(five, 14, 6)
    restarts = [m for m in matrix if m.endswith("+pg-restart")]
    assert matrix[: len(restarts)] == restarts and "mid_commit:1+pg-restart" in restarts
    assert matrix[len(restarts) :] == config_matrix(CONFIGS["parquet"], 14, 6)
    assert {m.removesuffix("+pg-restart").split(":")[0] for m in restarts} <= set(DRIVER_POINTS) | set(
        EXECUTOR_POINTS
    )


def test_a_postgres_restart_trial_needs_the_server(tmp_path: Path) -> None:
    plan = TrialPlan(1, "fault", fault="mid_commit:1+pg-restart", config="parquet")
    with pytest.raises(ValueError, match="needs the PostgreSQL server"):
        runner.run_trial(plan, tmp_path, None, None, 2, 1, "r")


def test_the_report_has_a_column_per_sink_the_trials_wrote_to(tmp_path: Path) -> None:
    from twophase.integration.chaos.report import result_json, sink_columns
    from twophase.integration.verify import SinkReport, VerifyReport

    names = ("kafka", "s3", "delta", "postgres", "iceberg")
    report = VerifyReport("j", 5, tuple(SinkReport(n, "", records=5) for n in names), True, "final")
    result = TrialResult(TrialPlan(0, "plain", config="five"), "j", exit_codes=[0], report=report)
    assert sink_columns([result]) == list(names)
    assert sink_columns([]) == ["kafka", "s3", "delta"]
    write_report(tmp_path / "r.md", [result], {})
    assert "| kafka | s3 | delta | postgres | iceberg | lingering |" in (tmp_path / "r.md").read_text()
    assert json.loads(result_json(result))["records"]["iceberg"] == 5


def test_the_expiry_configuration_has_its_own_broker_and_stays_down_past_the_id_expiration() -> None:
    """#26 item 2: async commit, a broker that forgets transactional ids within seconds, and a
    driver that stays down longer than that after every crash; not a default (its own broker)."""
    expiry = CONFIGS["expiry"]
    assert "expiry" not in LOCAL.split(",") and expiry.async_commit
    settings = dict(expiry.kafka_settings)
    expiration_ms = int(settings["transactional.id.expiration.ms"])
    sweep_ms = int(settings["transaction.remove.expired.transaction.cleanup.interval.ms"])
    assert expiry.down_s * 1000 > expiration_ms + sweep_ms
    assert config_matrix(expiry, 14, 6) == config_matrix(CONFIGS["async"], 14, 6)


def test_the_paths_of_doubt_are_counted_from_the_driver_log(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    assert runner.doubt_evidence(log) == {}
    log.write_text(
        "x INFO twophase.connectors.kafka.internal.committer transaction marker searched a found=True\n"
        "x INFO twophase.connectors.kafka.internal.committer transaction marker searched b found=None\n"
        "x WARNING twophase.coordinator.storage.s3 retrying S3 call job=j op=PutObject\n"
        "x INFO twophase.coordinator.storage.s3 conditional PUT answered 412 after a retry; our own "
        "write had landed uri=s3://b/k\n"
        "x INFO other line\n"
    )
    assert runner.doubt_evidence(log) == {
        "searched": 2,
        "commit_found": 1,
        "s3_retries": 1,
        "own_put_read_back": 1,
    }


def test_the_publish_configuration_stalls_the_storage_first_and_is_not_a_default() -> None:
    """#26 item 1: a trial of ``publish`` holds the driver before a checkpoint's publish and stops
    MinIO under it, shorter and longer than the S3 read timeout; then the ``s3`` matrix."""
    publish = CONFIGS["publish"]
    assert "publish" not in LOCAL.split(",") and publish.on_s3
    matrix = config_matrix(publish, 14, 6)
    stalls = [f for f in matrix if "+s3-stall:" in f]
    assert stalls == matrix[: len(stalls)] and len(stalls) == 6
    assert {f.split("+")[0] for f in stalls} == {"before_persist:1", "before_persist:2", "before_persist:4"}
    assert {f.rsplit(":", 1)[1] for f in stalls} == {"20", "75"}
    assert matrix[len(stalls) :] == config_matrix(CONFIGS["s3"], 14, 6)


def test_a_storage_stall_stops_the_process_while_the_job_goes_on(tmp_path: Path) -> None:
    import signal
    import subprocess

    from twophase.coordinator.state.faults import paused_marker, resume_marker

    # every wait is a bounded poll: on a loaded machine the watcher thread and the signals take
    # their time, so a stall as short as the old 0.5 s window could end before it was seen (#45 item 7)
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        state = tmp_path / "fault-state"
        state.mkdir()
        # a stall longer than the block: the process stays stopped while the job goes on, until
        # the block ends
        with runner.stall_storage_when_paused(sleeper.pid, state, "before_persist", 1, 300) as resumed:
            paused_marker(state, "before_persist", 1).touch()  # the job holds at the point
            assert eventually(lambda: resume_marker(state, "before_persist", 1).exists())  # goes on
            assert eventually(lambda: state_of(sleeper.pid) == "T")  # SIGSTOP acts asynchronously
            assert not resumed.is_set()
        assert resumed.is_set()
        assert eventually(lambda: state_of(sleeper.pid) != "T")
        # a stall shorter than the block ends by itself
        with runner.stall_storage_when_paused(sleeper.pid, state, "before_persist", 2, 0.5) as resumed:
            paused_marker(state, "before_persist", 2).touch()
            assert resumed.wait(60)
            assert resume_marker(state, "before_persist", 2).exists()
            assert eventually(lambda: state_of(sleeper.pid) != "T")
    finally:
        sleeper.send_signal(signal.SIGKILL)
        sleeper.wait()


def state_of(pid: int) -> str:
    """A process's state letter (``T``: stopped), from /proc."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_the_unmarked_and_two_drivers_configurations_run_apart_on_s3() -> None:
    unmarked, two = CONFIGS["unmarked"], CONFIGS["two-drivers"]
    assert "unmarked" not in LOCAL.split(",") and "two-drivers" not in LOCAL.split(",")
    assert unmarked.refuse_markers and unmarked.on_s3 and unmarked.kafka_settings and unmarked.down_s > 0
    assert two.second_driver_s and two.on_s3 and not two.refuse_markers
    assert config_matrix(two, 14, 6) == config_matrix(CONFIGS["s3"], 14, 6)


def test_a_fenced_driver_run_is_counted_from_its_log(tmp_path: Path) -> None:
    (tmp_path / "job.log").write_bytes(
        b"\n=== run fault=None kill_after_s=None ===\nTraceback\n"
        b"twophase.sinks.errors.DriverFencedError: driver epoch 1 of job 'j' is fenced by a newer driver\n"
        b"\n=== run fault=None kill_after_s=None ===\nfinished\n"
    )
    (tmp_path / "job-2.log").write_bytes(b"\n=== run fault=None kill_after_s=None ===\nfinished\n")
    assert fenced_drivers(tmp_path) == 1


def test_a_driver_run_spark_refused_is_counted_apart(tmp_path: Path) -> None:
    """Two-drivers trial 15 on 53aaded: the second driver claimed its epoch (fencing the first),
    then Spark refused its query because the first driver's query was creating the checkpoint's
    metadata file that moment; both exited 1 and the restart finished exactly once."""
    (tmp_path / "job-2.log").write_bytes(
        b"\n=== run fault=None kill_after_s=None ===\nerror=An error occurred while calling o328.start.\n"
        b": org.apache.spark.SparkConcurrentModificationException: Multiple streaming queries are "
        b"concurrently using metadata.\n"
    )
    assert refused_drivers(tmp_path) == 1 and fenced_drivers(tmp_path) == 0


def test_the_yarn_configuration_runs_apart_on_s3_and_reads_its_driver_faults_from_the_state(
    tmp_path: Path,
) -> None:
    yarn = CONFIGS["yarn"]
    assert "yarn" not in LOCAL.split(",") and yarn.yarn and not yarn.cluster
    spec = yarn.spec("y1", tmp_path / "w", 14, 6)
    assert spec.checkpoint_uri.startswith("s3://") and spec.input_uri.startswith("s3://")
    assert config_matrix(yarn, 14, 6) == config_matrix(CONFIGS["s3"], 14, 6)
    # a driver fault ends the attempt, not spark-submit: its hit is read from the shared state
    state = tmp_path / "fault-state"
    state.mkdir()
    assert not fault_reached("after_persist:2", state, 0, driver_exits=False)
    (state / "after_persist.2").touch()
    assert fault_reached("after_persist:2", state, 0, driver_exits=False)
    assert not fault_reached("after_persist:2", state, 0)


def test_yarn_attempts_are_counted_from_the_submissions_outcome_lines(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(
        "\n=== run fault=None kill_after_s=12.0 ===\n"
        '{"application": "application_1_0001", "final_status": "SUCCEEDED", '
        '"attempts": [{"id": "a1"}, {"id": "a2"}], "exit_status": 0}\n'
    )
    assert yarn_attempts(log) == 2
    assert yarn_attempts(tmp_path / "missing.log") == 0


def test_the_azure_configuration_keeps_checkpoints_files_and_delta_on_abfss(tmp_path: Path) -> None:
    spec = CONFIGS["azure"].spec("j1", tmp_path / "w", 14, 7)
    root = f"abfss://{spec.bucket}@twophase.dfs.core.windows.net"
    assert (spec.store, spec.file_sink, spec.sinks) == ("azure", "azure", ("kafka", "delta", "azure"))
    assert spec.checkpoint_dir == f"{root}/checkpoints/j1"
    assert spec.delta_uri == f"{root}/delta/j1"
    assert spec.files_location == f"{root}/flights/j1"
    assert not spec.spark_checkpoint_uri and not spec.input_uri  # Spark's own state stays local
    spec.save()
    assert FlightsJobSpec.load(spec.work_dir) == spec
    assert "azure" not in LOCAL.split(",") and "gcs" not in LOCAL.split(",")


def test_the_gcs_configuration_keeps_checkpoints_and_files_on_gs_and_delta_in_the_work_dir(
    tmp_path: Path,
) -> None:
    assert [c.name for c in configs_named("azure,gcs")] == ["azure", "gcs"]
    spec = CONFIGS["gcs"].spec("j1", tmp_path / "w", 14, 7)
    assert (spec.store, spec.file_sink, spec.sinks) == ("gcs", "gcs", ("kafka", "delta", "gcs"))
    assert spec.checkpoint_dir == f"gs://{spec.bucket}/checkpoints/j1"
    assert spec.files_location == f"gs://{spec.bucket}/flights/j1"
    # delta-rs cannot write gs:// to fake-gcs-server: the table is the one part not on GCS
    assert spec.delta_uri == str(tmp_path / "w" / "delta")
    assert not spec.spark_checkpoint_uri and not spec.input_uri
    spec.save()
    assert FlightsJobSpec.load(spec.work_dir) == spec


def test_a_delta_table_on_gs_is_refused_by_name_saying_why(tmp_path: Path) -> None:
    why = r"Delta on gs:// is refused: delta-rs .* XML API.*fake-gcs-server#331"
    with pytest.raises(ConfigError, match=why):
        FlightsJobSpec.on_store("gcs", "j", tmp_path, delta_uri="gs://twophase-flights/delta/j")
    with pytest.raises(ConfigError, match=why):
        FlightsJobSpec(job_id="j", work_dir=str(tmp_path), delta_uri="gs://b/t")
    assert not (tmp_path / "flights-job.json").exists()
    # the places delta-rs can write stay open to a gcs run
    on_minio = FlightsJobSpec.on_store("gcs", "j", tmp_path, delta_uri="s3://twophase-flights/delta/j")
    assert on_minio.delta_uri == "s3://twophase-flights/delta/j" and on_minio.checkpoint_dir.startswith(
        "gs://"
    )


def test_a_run_names_the_file_sink_of_its_store_and_refuses_the_others() -> None:
    spec = FlightsJobSpec.on_store("azure", "j", "/tmp/x", sinks=("kafka", "s3"))
    assert spec.sinks == ("kafka", "azure")
    with pytest.raises(ConfigError, match="file sink azure does not write to --store s3"):
        FlightsJobSpec(job_id="j", work_dir="/tmp/x", sinks=("kafka", "azure"))
    with pytest.raises(ConfigError, match="postgres run on --store s3 only"):
        FlightsJobSpec.on_store("azure", "j", "/tmp/x", sinks=("kafka", "postgres"))
    with pytest.raises(ConfigError, match="checkpoint_uri of a --store azure run"):
        FlightsJobSpec(job_id="j", work_dir="/tmp/x", store="azure", checkpoint_uri="s3://b/c")
    with pytest.raises(ConfigError, match="store must be one of"):
        FlightsJobSpec(job_id="j", work_dir="/tmp/x", store="hdfs")
    assert FlightsJobSpec.on_store("gcs", "j", "/tmp/x", sinks=("kafka", "s3")).sinks == ("kafka", "gcs")
    with pytest.raises(ConfigError, match="file sink azure does not write to --store gcs"):
        FlightsJobSpec.on_store("gcs", "j", "/tmp/x", sinks=("kafka", "azure"))
    with pytest.raises(ConfigError, match="checkpoint_uri of a --store gcs run"):
        FlightsJobSpec(job_id="j", work_dir="/tmp/x", store="gcs", checkpoint_uri="s3://b/c")


def test_the_staged_configurations_write_one_sink_with_a_jvm_writer_apart(tmp_path: Path) -> None:
    for name, sink in (("s3staged", "s3"), ("kafkastaged", "kafka")):
        config = CONFIGS[name]
        spec = config.spec("j1", tmp_path / name, 14, 7)
        assert (spec.sinks, spec.write_path, config.executor_kills) == ((sink,), "spark", ())
        assert name not in LOCAL.split(",")
    with pytest.raises(ConfigError, match="write_path spark"):
        replace(CONFIGS["kafkastaged"], sinks=("kafka", "delta")).spec("j2", tmp_path / "j2", 14, 7)
