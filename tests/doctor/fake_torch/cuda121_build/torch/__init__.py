"""Fake torch (doctor probe), scenario 'cuda121_build' (faked at the import boundary)."""

from types import SimpleNamespace

from . import version

__version__ = version.__version__
_DEVICES = [("Tesla T4", 15843721216, 7, 5)]


class _Props(SimpleNamespace):
    pass


class cuda:
    @staticmethod
    def is_available():
        return False

    @staticmethod
    def device_count():
        return len(_DEVICES)

    @staticmethod
    def get_device_properties(i):
        name, mem, major, minor = _DEVICES[i]
        return _Props(name=name, total_memory=mem, major=major, minor=minor)

    @staticmethod
    def get_device_name(i):
        return _DEVICES[int(str(i).split(":")[-1])][0]
