"""Compact, exact encodings for per-chunk arrays, and JSON (de)serialisation for the engine."""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from typing import Any

import orjson

_BIG_ENDIAN = sys.byteorder == "big"
_INT32 = next(code for code in ("i", "l") if array(code).itemsize == 4)


def pack_f64(values: Sequence[float]) -> bytes:
    """``values`` as little-endian float64 (8 bytes each; ``unpack_f64`` returns them bit for bit)."""
    arr = array("d", values)
    if _BIG_ENDIAN:
        arr.byteswap()
    return arr.tobytes()


def unpack_f64(blob: bytes) -> list[float]:
    arr = array("d")
    arr.frombytes(blob)
    if _BIG_ENDIAN:
        arr.byteswap()
    return arr.tolist()


def pack_i32(values: Sequence[int]) -> bytes:
    arr = array(_INT32, values)
    if _BIG_ENDIAN:
        arr.byteswap()
    return arr.tobytes()


def unpack_i32(blob: bytes) -> list[int]:
    arr = array(_INT32)
    arr.frombytes(blob)
    if _BIG_ENDIAN:
        arr.byteswap()
    return arr.tolist()


_JSON_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_UTC_Z


def json_dumps(obj: Any) -> str:
    """The engine's JSON serialiser (NaN and infinity become ``null``, as in any JSON)."""
    return orjson.dumps(obj, option=_JSON_OPTS).decode()


def json_loads(text: str | bytes) -> Any:
    return orjson.loads(text)
