"""Where a run's bytes come from: the platform fingerprint, and the portable numerics mode.

A run's metrics are byte-identical for the same config and seed on the same *fingerprint*: the torch build,
the CPU kernel set ATen dispatches to (`torch.backends.cpu.get_cpu_capability()`), the BLAS and its
reproducibility mode (MKL's CBWR), oneDNN, and the thread count. Two machines with different kernel sets
(AVX-512, AVX2, the scalar `DEFAULT`) round some sums differently in the last bits, and a run's steps carry those
bits forward: same values to ~1e-7, not the same bytes (docs/metrics.md, "Where byte-identity holds").

`numerics=portable` fixes what a machine would otherwise choose, before torch runs its first kernel: ATen's
scalar kernels, MKL's CBWR=COMPATIBLE branch, oneDNN off, one thread. Its cost and what it buys are measured in
docs/metrics.md; it is not the default.
"""
from __future__ import annotations

import ctypes
import functools
import os
import re

from minitrain.core.errors import UserError

MODES = ("native", "portable")
# what portable mode sets in the environment before torch's first kernel; read by ATen and MKL at that point
PORTABLE_ENV = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}
# the variables that choose a kernel path, recorded with the fingerprint and passed to Ray workers
KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA",
              "DNNL_MAX_CPU_ISA", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
# MKL's CBWR branch codes (mkl_cbwr_get); 1 is "none set" (MKL picks per call), STRICT is a flag bit
MKL_CBWR_BRANCHES = {1: "off", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3", 7: "SSE4_1", 8: "SSE4_2", 9: "AVX",
                     10: "AVX2", 11: "AVX512_MIC", 12: "AVX512", 13: "AVX512_MIC_E1", 14: "AVX512_E1"}
MKL_CBWR_STRICT = 0x10000
# the fields that decide the bytes; the rest of the fingerprint (the env it was asked with) is for the reader
KEY_FIELDS = ("torch", "torch_build", "cpu_capability", "blas", "mkl_cbwr", "onednn", "threads")


def apply(mode: str, threads: int) -> None:
    """Put this process in numerics MODE with THREADS torch threads, before a run's first kernel. Portable mode
    cannot be entered once torch has chosen its kernels: that is a one-line error saying to start afresh."""
    import torch

    if mode not in MODES:
        raise UserError(f"unknown numerics mode {mode!r}: use one of {', '.join(MODES)}")
    if mode == "portable":
        before = {name: os.environ.get(name) for name in PORTABLE_ENV}
        os.environ.update(PORTABLE_ENV)
        if torch.backends.cpu.get_cpu_capability() != "DEFAULT" or _mkl_branch() not in (None, "COMPATIBLE"):
            for name, value in before.items():  # the process is left as it was
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            raise UserError("numerics=portable must be chosen before torch runs its first kernel, and this process "
                            "already ran with the native ones: run it as a command of its own "
                            "(or set ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE before starting)")
        torch.backends.mkldnn.enabled = False
    torch.set_num_threads(threads)


def fingerprint() -> dict:
    """The platform this process computes on, as a run's manifest records it (environment.numerics)."""
    import torch

    fixed = _build()
    return {**fixed,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "mkl_cbwr": _mkl_branch() or "n/a",
            "onednn": fixed["onednn"] if torch.backends.mkldnn.enabled else "off",
            "threads": torch.get_num_threads(),
            "env": {k: os.environ[k] for k in KERNEL_ENV if k in os.environ}}


def key(fp: dict | None) -> str:
    """FP as one short line ("2.13.0+cpu AVX512 mkl-2024.2 cbwr=AUTO onednn-3.12.0 1t"): two runs with the same key
    give the same bytes for the same config. A record without one (made before fingerprints) reads "unknown"."""
    if not isinstance(fp, dict) or not all(k in fp for k in KEY_FIELDS):
        return "unknown"
    return (f"{fp['torch']} {fp['cpu_capability']} {fp['blas']} cbwr={fp['mkl_cbwr']} "
            f"onednn-{fp['onednn']} {fp['threads']}t")


def same(a: dict | None, b: dict | None) -> bool:
    """Do records A and B name one platform (both known)?"""
    return key(a) != "unknown" and key(a) == key(b) and a.get("torch_build") == b.get("torch_build")


@functools.cache
def _build() -> dict:
    """What the torch build links: read once (torch.__config__.show() is a long string); torch is imported by the
    functions that need it, so the views can read a fingerprint without it."""
    import torch

    shown = torch.__config__.show()
    mkl = re.search(r"Math Kernel Library Version ([\d.]+)", shown)
    dnn = re.search(r"MKL-DNN v([\d.]+)", shown)
    blas = re.search(r"BLAS_INFO=(\w+)", shown)
    name = blas.group(1) if blas else "unknown"
    return {"torch": torch.__version__, "torch_build": (torch.version.git_version or "")[:12],
            "blas": f"{name}-{mkl.group(1)}" if name == "mkl" and mkl else name,
            "onednn": dnn.group(1) if dnn and torch.backends.mkldnn.is_available() else "off"}


def _mkl_branch() -> str | None:
    """MKL's conditional-numerical-reproducibility branch in force (AUTO unless MKL_CBWR set one), read from
    the MKL that torch links; None where torch has no MKL. Reading it fixes it, as MKL's first call does: after
    this, MKL_CBWR is no longer read."""
    lib = _mkl_lib()
    if lib is None:
        return None
    code = lib.mkl_serv_cbwr_get(ctypes.c_int(-1))  # MKL_CBWR_ALL: the branch and the STRICT bit
    branch = MKL_CBWR_BRANCHES.get(code & 0xFF, f"code-{code & 0xFF}")
    return branch + (",STRICT" if code & MKL_CBWR_STRICT else "")


@functools.cache
def _mkl_lib():
    import torch

    if not torch.backends.mkl.is_available():
        return None
    try:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        lib.mkl_serv_cbwr_get.restype = ctypes.c_int
        return lib
    except (OSError, AttributeError):
        return None
