"""The S3 sink's Spark-staged epoch, its pure half: naming, options, session checks and the
``.pendingset`` files turned into committables (the write itself: tests/integration)."""

from __future__ import annotations

from typing import Any

import pytest

from twophase.connectors.s3.internal import staged_write as sw
from twophase.sinks.errors import ConcurrentAttemptError, ConfigError


def pendingset(*commits: dict[str, Any]) -> dict[str, Any]:
    return {"version": 3, "commits": list(commits)}


def commit(key: str, upload: str, etags: list[Any], length: int = 10) -> dict[str, Any]:
    return {"bucket": "b", "destinationKey": key, "uploadId": upload, "etags": etags, "length": length}


def test_job_uuid_and_magic_folder() -> None:
    uuid = sw.staged_job_uuid("0123abcd4567", 17, "9f3c")
    assert uuid == "twophase-0123abcd4567-17-9f3c"
    assert sw.magic_folder("t/p", uuid) == f"t/p/__magic_job-{uuid}/"
    assert sw.magic_folder("", uuid) == f"__magic_job-{uuid}/"
    with pytest.raises(ValueError):
        sw.staged_job_uuid("tok/en", 1, "ab")
    with pytest.raises(ValueError):
        sw.staged_job_uuid("token", -1, "ab")


def test_write_options_name_the_factory_and_the_uuid() -> None:
    options = sw.write_options("twophase-t-1-a")
    assert options["mapreduce.outputcommitter.factory.scheme.s3a"] == sw.FACTORY_CLASS
    assert options["fs.s3a.committer.uuid"] == "twophase-t-1-a"
    with pytest.raises(ValueError):
        sw.write_options("bad uuid/")


def test_check_session_names_the_missing_setting() -> None:
    sw.check_session(sw.SESSION_SETTINGS.get)
    setting = r"spark\.sql\.sources\.commitProtocolClass=twophase\.s3\.StagingCommitProtocol"
    with pytest.raises(ConfigError, match=setting):
        sw.check_session(lambda _key: None)


def test_split_of_a_task_pendingset() -> None:
    assert (
        sw.split_of(
            "p/__magic_job-u/job-u/00/task_202612060003494358425105332867898_0007_m_000003.pendingset"
        )
        == 3
    )
    with pytest.raises(ValueError):
        sw.split_of("p/__magic_job-u/job-u/00/_SUCCESS")


def test_uploads_of_reads_both_etag_forms() -> None:
    body = pendingset(commit("p/a.parquet", "u1", [{"etag": '"e1"'}, '"e2"']))
    [u] = sw.uploads_of(body)
    assert (u.key, u.upload_id, u.etags) == ("p/a.parquet", "u1", ('"e1"', '"e2"'))
    with pytest.raises(ValueError, match="incomplete"):
        sw.uploads_of(pendingset(commit("p/a.parquet", "u1", [])))


def test_committables_per_split_with_listed_part_sizes() -> None:
    sets = {
        "p/__magic_job-u/job-u/00/task_1_0001_m_000000.pendingset": pendingset(
            commit("p/a", "u1", ['"x"', '"y"'])
        ),
        "p/__magic_job-u/job-u/00/task_1_0001_m_000002.pendingset": pendingset(
            commit("p/b", "u2", ['"z"']), commit("p/c", "u3", ['"w"'])
        ),
    }
    parts = {"u1": {1: ('"x"', 5), 2: ('"y"', 3)}, "u2": {1: ('"z"', 7)}, "u3": {1: ('"w"', 1)}}
    got = sw.staged_committables(sets, lambda key, upload: parts[upload])
    assert sorted(got) == [0, 2]
    assert [f.key for f in got[2].files] == ["p/b", "p/c"]
    [a] = got[0].files
    assert ([p.size for p in a.parts], a.byte_count) == ([5, 3], 8)


def test_parts_that_differ_from_the_task_record_are_refused() -> None:
    sets = {"f/task_1_0001_m_000000.pendingset": pendingset(commit("p/a", "u1", ['"x"']))}
    with pytest.raises(ConcurrentAttemptError, match="not those its task committed"):
        sw.staged_committables(sets, lambda key, upload: {1: ('"other"', 5)})
    with pytest.raises(ConcurrentAttemptError):
        sw.staged_committables(sets, lambda key, upload: {})


def test_two_pendingsets_for_one_split_are_refused() -> None:
    body = pendingset(commit("p/a", "u1", ['"x"']))
    sets = {"a/task_1_0001_m_000001.pendingset": body, "b/task_2_0001_m_000001.pendingset": body}
    with pytest.raises(ValueError, match=r"two \.pendingset files for split 1"):
        sw.staged_committables(sets, lambda key, upload: {1: ('"x"', 5)})


def test_read_pendingsets_skips_other_objects() -> None:
    store = {"f/x.pendingset": b'{"commits": []}', "f/marker": b""}
    got = sw.read_pendingsets(store, store.__getitem__)
    assert got == {"f/x.pendingset": {"commits": []}}


def test_staged_folders_of_this_job_and_sink_only() -> None:
    mine = "t/p/__magic_job-twophase-0123abcd4567-5-9f3c"
    keys = [
        f"{mine}/job-x/00/task_1_0001_m_000000.pendingset",
        f"{mine}/job-x/00/tasks/attempt_1_0001_m_000001_0/__base/part-1.parquet.pending",
        "t/p/__magic_job-twophase-ffffffffffff-5-9f3c/job-x/00/task_1_0001_m_000000.pendingset",
        "t/p/__magic_job-someone-else/x.pendingset",
        "t/p/part-00000-uuid-c000.snappy.parquet",
    ]
    [folder] = sw.staged_folders("t/p", "0123abcd4567", keys)
    assert (folder.folder, folder.checkpoint_id, len(folder.keys)) == (mine + "/", 5, 2)


def test_staged_uploads_of_committed_tasks_and_uncommitted_attempts() -> None:
    folder = sw.StagedFolder(
        "f/",
        5,
        ("f/job/00/task_1_0001_m_000000.pendingset", "f/job/00/tasks/a/__base/b.parquet.pending", "f/marker"),
    )
    bodies = {
        folder.keys[
            0
        ]: b'{"commits": [{"bucket": "b", "destinationKey": "p/a", "uploadId": "u1", "etags": ["e"]}]}',
        folder.keys[
            1
        ]: b'{"bucket": "b", "destinationKey": "p/b", "uploadId": "u2", "etags": [{"etag": "e"}]}',
    }
    assert [u.upload_id for u in sw.staged_uploads(folder, bodies.__getitem__)] == ["u1", "u2"]


def test_file_job_id_is_the_marker_s_second_line() -> None:
    assert sw.file_job_id(b"twophase-t-1-ab\n123f0d9b-072a-4ce9-b27e-92eb1eecacf5\n") == (
        "123f0d9b-072a-4ce9-b27e-92eb1eecacf5"
    )
    assert sw.file_job_id(b"twophase-t-1-ab\n\n") is None  # a session under another protocol
    assert sw.file_job_id(b"twophase-t-1-ab") is None
    assert sw.file_job_id(b"twophase-t-1-ab\n../x\n") is None


def test_files_of_write_by_spark_s_names_under_the_prefix() -> None:
    keys = [
        "t/p/part-00003-J1-c000.snappy.parquet",
        "t/p/day=2/part-00000-J1-c000.snappy.parquet",
        "t/p/part-00003-J1.parquet",
        "t/p/part-00003-J10-c000.snappy.parquet",  # another id that starts alike
        "t/q/part-00003-J1-c000.snappy.parquet",  # another prefix
        "t/p/x-part-00003-J1-c000.snappy.parquet",
    ]
    assert sw.files_of_write("t/p", "J1", keys) == keys[:3]
