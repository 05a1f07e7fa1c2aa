"""Internals of the object-store file layer (not public API).

Shared by every object-store file sink (S3, Azure Blob Storage, GCS): the file layout options
(:mod:`.layout`), data file names (:mod:`.naming`), the rolling decisions (:mod:`.rolling`), the
split of batches by partition (:mod:`.partitioning`), the Parquet, JSON lines and CSV encoders
(:mod:`.formats`) and the outcome of a multi-file commit (:mod:`.outcomes`).

Shared by the sinks whose every file rolls at every checkpoint and is one part-file transfer
(Azure's staged blocks, GCS's resumable uploads): the base of their configs (:mod:`.config`), the
subtask's transaction that routes rows to part files and rolls them (:mod:`.writer`), the sink's
common body (:mod:`.sink`), the shape of their committables and the commit loop
(:mod:`.committer`). S3 keeps its own writer: its row-format files span checkpoints.
"""
