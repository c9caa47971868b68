"""Matching GPU names as the tools print them to catalog entries.

``nvidia-smi`` says "NVIDIA GeForce RTX 4090" or "NVIDIA A100-SXM4-80GB", ``rocminfo`` says
"AMD Instinct MI300X", the user may type "rtx-4090". All of them are normalised the same way (lower
case, punctuation to spaces, brand words dropped) and then compared EXACTLY against each entry's key,
name and aliases: no substring guessing, because "H100" could be the SXM or the PCIe part (different
bandwidth and power) and a wrong guess would silently change a cost.
"""

from __future__ import annotations

import difflib
import re

# Brand words that tools add or omit inconsistently; dropping them makes "NVIDIA GeForce RTX 4090",
# "GeForce RTX 4090" and "RTX 4090" the same key. Model words (pro, rtx, rx, instinct-less MI...) stay.
_BRAND_WORDS = frozenset({"nvidia", "amd", "ati", "geforce", "radeon", "instinct", "tm", "r", "corporation"})
_SPLIT = re.compile(r"[^a-z0-9.]+")


def normalise_name(name: str) -> str:
    """``"NVIDIA A100-SXM4-80GB"`` -> ``"a100 sxm4 80gb"``; ``"Radeon RX 7900 XTX"`` -> ``"rx 7900 xtx"``."""
    words = [w.strip(".") for w in _SPLIT.split(name.lower())]
    return " ".join(w for w in words if w and w not in _BRAND_WORDS)


def close_matches(name: str, candidates: dict[str, str], limit: int = 5) -> list[str]:
    """Keys whose normalised names resemble ``name``: every entry containing all of its words first
    (so "H100" suggests both H100 parts), then difflib's closest."""
    wanted = normalise_name(name)
    words = set(wanted.split())
    out: list[str] = []
    if words:
        for norm, key in sorted(candidates.items()):
            if words <= set(norm.split()) and key not in out:
                out.append(key)
    for norm in difflib.get_close_matches(wanted, list(candidates), n=limit, cutoff=0.6):
        key = candidates[norm]
        if key not in out:
            out.append(key)
    return out[:limit]
