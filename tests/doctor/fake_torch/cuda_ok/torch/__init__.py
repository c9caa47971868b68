"""Fake torch (doctor probe), scenario 'cuda_ok' (faked at the import boundary)."""

from types import SimpleNamespace

from . import version

__version__ = version.__version__
_DEVICES = [("NVIDIA A100-SXM4-80GB", 85899345920, 8, 0)]


class _Props(SimpleNamespace):
    pass


class cuda:
    @staticmethod
    def is_available():
        return True

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
