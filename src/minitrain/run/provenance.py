"""What a run was made with, as its manifest records it: the git commit (core/provenance.py), the process's
versions and hardware, and the platform fingerprint its bytes depend on (core/numerics.py). torch is
imported inside the functions only: `minitrain import` and the readers never need it."""
from __future__ import annotations

import functools
import os
import platform
import sys

from minitrain.core import numerics
from minitrain.core.provenance import git_sha


@functools.cache
def process_environment() -> dict:
    """What stays fixed for the process, read once and before any run lock is taken: the git sha and the
    platform (`uname -p`) come from subprocesses, and a subprocess shares the lock's descriptor until it
    execs (files.RunLock)."""
    import safetensors
    import tokenizers
    import torch

    from minitrain import __version__

    return {
        "versions": {"minitrain": __version__, "python": platform.python_version(), "torch": torch.__version__,
                     "tokenizers": tokenizers.__version__, "safetensors": safetensors.__version__},
        "hardware": {"platform": platform.platform(), "machine": platform.machine(), "cpu_count": os.cpu_count()},
        "git_sha": git_sha(),
    }


def environment(device=None) -> dict:
    """The manifest's environment fields for a run trained by this process on `device` (a torch.device)."""
    import torch

    from minitrain.core import distributed

    fixed = process_environment()
    return {
        "versions": dict(fixed["versions"]),
        "hardware": {**fixed["hardware"], "torch_threads": torch.get_num_threads(),
                     "device": str(device or "cpu"), "world_size": distributed.world_size(),
                     **({"gpu": torch.cuda.get_device_name(device)} if device and device.type == "cuda" else {})},
        "numerics": numerics.fingerprint(),  # what the bytes depend on besides the config (core/numerics.py)
        "git_sha": fixed["git_sha"],
    }


def numerics_change(source: dict, what: str, mixed: list, announce: bool = True) -> dict:
    """A fork or resume continues steps another process computed (SOURCE: the manifest it wrote): when that
    process's platform fingerprint differs from this one's, say so in one line (`announce`) and record it in
    the manifest (`numerics_mixed`): the continued run's bytes cannot match a run made from scratch on either
    platform."""
    theirs, mine = source.get("numerics"), numerics.fingerprint()
    if numerics.same(theirs, mine):
        return {"numerics_mixed": mixed} if mixed else {}
    if announce:
        print(f"minitrain: {what} ran on {numerics.key(theirs)}, this process on {numerics.key(mine)}: this run's "
              "bytes will match a run from scratch on neither (recorded as numerics_mixed in manifest.json)",
              file=sys.stderr)
    return {"numerics_mixed": [*mixed, {"source": what, "numerics": theirs}]}
