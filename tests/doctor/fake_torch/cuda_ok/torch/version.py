__all__ = ["__version__", "debug", "cuda", "git_version", "hip", "rocm", "xpu"]
__version__ = "2.5.1+cu121"
debug = False
cuda: str | None = "12.1"
git_version = "cf30153c4c131c8164ee7798e5022d810682e2cb"
hip: str | None = None
rocm: str | None = None
xpu: str | None = None
