"""Images of the size a real server sends: a PNG of random pixels does not compress, so a 1024×1024 one is
about 3 MiB, as a photograph-like SDXL image is (the replay servers' gradients compress to a few KB, smaller
than any buffer of the HTTP stack, and hid readers that stop at one buffer)."""

from __future__ import annotations

import random
import struct
import zlib


def noisy_png(width: int, height: int, seed: int = 0) -> bytes:
    """A valid RGB PNG of ``width`` × ``height`` random pixels (about ``3 × width × height`` bytes)."""
    rng = random.Random(seed)
    rows = b"".join(b"\x00" + rng.randbytes(3 * width) for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(rows, 1))
        + chunk(b"IEND", b"")
    )
