"""Helpers shared by several test areas (real artefacts built on the fly, never mocks)."""
