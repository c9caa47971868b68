"""Thumbnails of generated images: a PIL image (diffusers) or encoded bytes (a server's PNG/JPEG/WebP)
downscaled to at most ``THUMBNAIL_PX`` on the longest side and stored as PNG, base64. The one module that
imports Pillow (lazily: without it a run keeps no thumbnails, and says why)."""

from __future__ import annotations

import base64
import importlib
import io
import zlib
from typing import Any

from gpuledger.kinds.image.summary import MAX_THUMBNAIL_CHARS, THUMBNAIL_PX, Thumbnail

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
    """(width, height) of an encoded image, without Pillow and without decoding its pixels, when its bytes
    hold the whole structure of one: PNG (signature, ``IHDR`` first, every chunk's length and CRC, an
    ``IDAT``, ``IEND`` last), JPEG (``SOI``, its segments up to a frame header, ``EOI`` at the end), WebP
    (``RIFF`` size, a ``VP8``/``VP8L``/``VP8X`` header) or GIF (header, logical screen, trailer); None for
    anything else (a server's junk payload is not an image). Cheap enough for every image of every answer:
    one CRC pass over a PNG, a walk over a JPEG's segment headers."""
    if blob[:8] == _PNG:
        return _png_size(blob)
    if blob[:3] == b"\xff\xd8\xff":
        return _jpeg_size(blob)
    if blob[:4] == b"RIFF" and blob[8:12] == b"WEBP":
        return _webp_size(blob)
    if blob[:6] in (b"GIF87a", b"GIF89a"):
        return _gif_size(blob)
    return None


NOT_AN_IMAGE = "is not a whole PNG, JPEG, WebP or GIF image"
_PNG = b"\x89PNG\r\n\x1a\n"
MAX_SIDE = 1 << 20  # pixels on one side: more is no image a server generated


def _sides(w: int, h: int) -> tuple[int, int] | None:
    return (w, h) if 0 < w <= MAX_SIDE and 0 < h <= MAX_SIDE else None


def _png_size(blob: bytes) -> tuple[int, int] | None:
    i, n = 8, len(blob)
    size: tuple[int, int] | None = None
    data = False
    while i + 12 <= n:
        length = int.from_bytes(blob[i : i + 4], "big")
        kind = blob[i + 4 : i + 8]
        end = i + 12 + length
        if end > n or zlib.crc32(blob[i + 4 : end - 4]) != int.from_bytes(blob[end - 4 : end], "big"):
            return None
        if i == 8:
            if kind != b"IHDR" or length != 13:
                return None
            size = _sides(int.from_bytes(blob[16:20], "big"), int.from_bytes(blob[20:24], "big"))
        data = data or kind == b"IDAT"
        if kind == b"IEND":
            return size if data and end == n else None
        i = end
    return None


def _jpeg_size(blob: bytes) -> tuple[int, int] | None:
    if not blob.rstrip(b"\x00").endswith(b"\xff\xd9"):
        return None
    i, n = 2, len(blob)
    while i + 4 <= n:
        if blob[i] != 0xFF:
            return None
        marker = blob[i + 1]
        if marker == 0xFF:  # fill bytes
            i += 1
            continue
        length = int.from_bytes(blob[i + 2 : i + 4], "big")
        if length < 2 or i + 2 + length > n:
            return None
        if marker in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF):
            if length < 7:
                return None
            height = int.from_bytes(blob[i + 5 : i + 7], "big")
            return _sides(int.from_bytes(blob[i + 7 : i + 9], "big"), height)
        if marker == 0xDA:  # scan data before any frame header
            return None
        i += 2 + length
    return None


def _webp_size(blob: bytes) -> tuple[int, int] | None:
    if int.from_bytes(blob[4:8], "little") + 8 != len(blob) or len(blob) < 30:
        return None
    kind = blob[12:16]
    if kind == b"VP8 " and blob[23:26] == b"\x9d\x01\x2a":
        width, height = int.from_bytes(blob[26:28], "little"), int.from_bytes(blob[28:30], "little")
        return _sides(width & 0x3FFF, height & 0x3FFF)
    if kind == b"VP8L" and blob[20] == 0x2F:
        bits = int.from_bytes(blob[21:25], "little")
        return _sides((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if kind == b"VP8X":
        return _sides(int.from_bytes(blob[24:27], "little") + 1, int.from_bytes(blob[27:30], "little") + 1)
    return None


def _gif_size(blob: bytes) -> tuple[int, int] | None:
    if len(blob) < 14 or not blob.endswith(b"\x3b"):
        return None
    return _sides(int.from_bytes(blob[6:8], "little"), int.from_bytes(blob[8:10], "little"))
