"""The object-store file layer: what the S3, Azure Blob Storage and GCS file sinks share, and no
connector of its own (it has no ``declaration``, so :mod:`twophase.sinks.registry` skips it).

Everything lives in ``internal`` (no public API): the file layout options and their checks, data
file names, rolling, the split of batches by partition columns, the Parquet, JSON lines and CSV
encoders, and, for the stores whose files roll at every checkpoint (Azure, GCS), the part-file
writer, the sink's common body, the base of their configs and the commit loop. How bytes reach a
store, how a part becomes visible and how leftovers are listed stays in each store's connector.
"""
