"""What the object-store file sinks (S3, Azure Blob Storage) share: the file layout options
(:mod:`.layout`), data file names (:mod:`.naming`), the rolling decisions (:mod:`.rolling`), the
split of batches by partition (:mod:`.partitioning`) and the Parquet, JSON lines and CSV encoders
(:mod:`.formats`). How bytes reach a store, and how a store commits them, stays in each connector.
"""
