"""pyiceberg's pyarrow FileIO, mended for Azure locations and GCS emulators (issue #46).

pyiceberg 0.12's ``PyArrowFileIO`` hands pyarrow the path ``<netloc><path>`` of every location.
For ``abfss://<container>@<account>.dfs.core.windows.net/<path>`` that puts the account's host into
the container name, which pyarrow's ``AzureFileSystem`` then cannot find (apache/iceberg-python
#2698; the fix is merged upstream after 0.12). :class:`CloudFileIO` gives pyarrow
``<container>/<path>``, as ``pyarrow.fs.FileSystem.from_uri`` does. It also opens pyarrow's GCS
file system without credentials when :data:`GCS_ANONYMOUS` is set, which an emulator such as
fake-gcs-server needs (pyiceberg has no property for pyarrow's ``anonymous``). Everything else is
``PyArrowFileIO``'s own.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pyarrow.fs import FileSystem
from pyiceberg.io import GCS_SERVICE_HOST
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.typedef import Properties

GCS_ANONYMOUS = "twophase.gcs.anonymous"
"""FileIO property: ``"true"`` opens pyarrow's GCS file system anonymously (an emulator's)."""
AZURE_SCHEMES = frozenset({"abfs", "abfss", "wasb", "wasbs"})
IMPL = f"{__name__}.CloudFileIO"
"""The ``py-io-impl`` property that selects :class:`CloudFileIO`."""


class CloudFileIO(PyArrowFileIO):
    """``PyArrowFileIO`` whose Azure paths leave the account out and whose GCS file system can be
    anonymous (module docstring). Properties as ``PyArrowFileIO``'s (``adls.*``, ``gcs.*``, ``s3.*``)
    plus :data:`GCS_ANONYMOUS`."""

    @staticmethod
    def parse_location(location: str, properties: Properties | None = None) -> tuple[str, str, str]:
        """``(scheme, netloc, path)`` of ``location``; for Azure the path is ``<container>/<path>``."""
        scheme, netloc, path = PyArrowFileIO.parse_location(location, properties or {})
        if scheme in AZURE_SCHEMES and "@" in netloc:
            container = netloc.split("@", 1)[0]
            path = container + urlsplit(location).path
        return scheme, netloc, path

    def _initialize_gcs_fs(self) -> FileSystem:
        if str(self.properties.get(GCS_ANONYMOUS, "")).lower() != "true":
            return super()._initialize_gcs_fs()
        from pyarrow.fs import GcsFileSystem

        kwargs: dict[str, Any] = {"anonymous": True}
        endpoint = self.properties.get(GCS_SERVICE_HOST)
        if endpoint:
            parts = urlsplit(endpoint)
            kwargs.update(scheme=parts.scheme, endpoint_override=parts.netloc)
        return GcsFileSystem(**kwargs)
