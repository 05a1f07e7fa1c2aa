"""Blob names and block ids of the Azure file sink, as pure functions (no I/O).

Blob names are the shared data file names (:mod:`twophase.connectors.objectstore.internal.naming`)::

    <prefix>/<partition path>/part-<partition>-<checkpoint>-<token>-<uuid>.<ext>

Block ids are ``<nonce><sequence>``: a 16-hex-digit nonce drawn once per open file (per task
attempt), then the block's 6-digit sequence number. Azure requires every block id of one blob to
have the same length (at most 64 bytes before base64; the SDK encodes them), and the nonce keeps
two attempts that ever staged on one name from overwriting each other's blocks.
"""

from __future__ import annotations

import re
import secrets

from twophase.connectors.azure.config import MAX_BLOCKS

NONCE_HEX = 16
"""Hex digits of a block id's nonce."""

_BLOCK_ID_RE = re.compile(rf"[0-9a-f]{{{NONCE_HEX}}}\d{{6}}")


def new_nonce() -> str:
    """A fresh block id nonce (``NONCE_HEX`` random hex digits)."""
    return secrets.token_hex(NONCE_HEX // 2)


def block_id(nonce: str, sequence: int) -> str:
    """The id of block ``sequence`` (1..50,000) of the file whose blocks carry ``nonce``.

    Raises:
        ValueError: a malformed nonce or a sequence outside Azure's 50,000 blocks.
    """
    if not 1 <= sequence <= MAX_BLOCKS:
        raise ValueError(f"block sequence must be within 1..{MAX_BLOCKS}, got {sequence}")
    out = f"{nonce}{sequence:06d}"
    if not _BLOCK_ID_RE.fullmatch(out):
        raise ValueError(f"block nonce must be {NONCE_HEX} hex digits, got {nonce!r}")
    return out
