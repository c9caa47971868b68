__all__ = ["__version__", "debug", "cuda", "git_version", "hip", "rocm", "xpu"]
__version__ = "2.5.1+rocm6.0"
debug = False
cuda: str | None = None
git_version = "cf30153c4c131c8164ee7798e5022d810682e2cb"
hip: str | None = "6.0.32830-d62f6a171"
rocm: str | None = "6.0"
xpu: str | None = None
