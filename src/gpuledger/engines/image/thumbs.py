"""Thumbnails of generated images: a PIL image (diffusers) or encoded bytes (a server's PNG/JPEG/WebP)
downscaled to at most ``THUMBNAIL_PX`` on the longest side and stored as PNG, base64. The one module that
imports Pillow (lazily: without it a run keeps no thumbnails, and says why)."""

from __future__ import annotations

import base64
import importlib
import io
from typing import Any

from gpuledger.records.image import MAX_THUMBNAIL_CHARS, THUMBNAIL_PX, Thumbnail

NO_PILLOW = "thumbnails not kept: Pillow is not installed (pip install 'gpuledger[image]')"
# A server's image larger than this is not decoded for a thumbnail (bytes; pixels below).
MAX_SOURCE_BYTES = 64 * 1024**2
MAX_SOURCE_PIXELS = 64 * 1024**2


def _pil() -> Any | None:
    try:
        return importlib.import_module("PIL.Image")
    except ImportError:
        return None


def pillow_available() -> bool:
    return _pil() is not None


def thumbnail_of(image: Any, request: int) -> Thumbnail | None:
    """A PIL image -> its thumbnail (None when it cannot be encoded)."""
    pil = _pil()
    if pil is None:
        return None
    src_w, src_h = (int(v) for v in image.size)
    small = image.convert("RGB")
    small.thumbnail((THUMBNAIL_PX, THUMBNAIL_PX), pil.Resampling.LANCZOS)
    buf = io.BytesIO()
    small.save(buf, format="PNG", optimize=True)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    if len(data) > MAX_THUMBNAIL_CHARS:
        return None
    w, h = (int(v) for v in small.size)
    return Thumbnail(
        request=request, width=w, height=h, source_width=src_w, source_height=src_h, png_base64=data
    )


def thumbnail_of_bytes(blob: bytes, request: int) -> tuple[Thumbnail | None, str | None]:
    """Encoded image bytes from a server -> (thumbnail, None), or (None, why not)."""
    pil = _pil()
    if pil is None:
        return None, NO_PILLOW
    if len(blob) > MAX_SOURCE_BYTES:
        return (
            None,
            f"an image of {len(blob)} bytes was not decoded for a thumbnail (over {MAX_SOURCE_BYTES})",
        )
    errors = importlib.import_module("PIL")
    try:
        with pil.open(io.BytesIO(blob)) as img:
            w, h = img.size
            if w * h > MAX_SOURCE_PIXELS:
                return None, f"an image of {w}×{h} pixels was not decoded for a thumbnail"
            img.load()
            return thumbnail_of(img, request), None
    except (OSError, ValueError, errors.UnidentifiedImageError, pil.DecompressionBombError) as exc:
        return None, f"the server's image could not be decoded: {type(exc).__name__}"


def image_size(blob: bytes) -> tuple[int, int] | None:
    """(width, height) of an encoded image from its header, without Pillow: PNG and JPEG; None otherwise."""
    if blob[:8] == b"\x89PNG\r\n\x1a\n" and len(blob) >= 24:
        return int.from_bytes(blob[16:20], "big"), int.from_bytes(blob[20:24], "big")
    if blob[:2] == b"\xff\xd8":
        i = 2
        while i + 9 < len(blob):
            if blob[i] != 0xFF:
                return None
            marker = blob[i + 1]
            length = int.from_bytes(blob[i + 2 : i + 4], "big")
            if marker in (0xC0, 0xC1, 0xC2):
                return int.from_bytes(blob[i + 7 : i + 9], "big"), int.from_bytes(blob[i + 5 : i + 7], "big")
            i += 2 + length
    return None
