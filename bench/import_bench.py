"""What `minitrain import` (run/importer.py) costs as a history grows: linear in its rows.

    python bench/import_bench.py [--rows 10000,100000,1000000]

Each size is a CSV shaped like a long W&B export: the loss and gradient norm every step, the learning rate
every 10th step, the validation loss every 1000th (the shape the carried-forward signals made quadratic
before). CPU time of the process (time.process_time: the machine is shared), the whole import (reading,
building the rows, writing the run folder); the last column is per row, constant when the import is linear.

Prints the markdown for docs/benchmarks.md, section "Import".
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from minitrain.run import importer


def write_history(path: Path, rows: int) -> None:
    with open(path, "w") as f:
        f.write("step,loss,lr,grad_norm,val_loss\n")
        for s in range(rows):
            lr = f"{1e-3 * (1 - s / rows):.6g}" if s % 10 == 0 else ""
            val = f"{3 - s / rows:.6g}" if s % 1000 == 0 else ""
            f.write(f"{s},{3.5 - s / rows:.6g},{lr},{1 + (s % 7) / 10:.3g},{val}\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="10000,100000,1000000")
    sizes = [int(x) for x in ap.parse_args().rows.split(",")]
    print("| rows | CPU seconds | per row |\n|---|---|---|")
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "history.csv"
            write_history(src, n)
            t0 = time.process_time()
            res = importer.import_run(src, Path(tmp) / "run")
            seconds = time.process_time() - t0
            assert res["steps"] == n and res["carried_forward"] == {"lr": n - (n + 9) // 10}
        print(f"| {n:,} | {seconds:.2f} | {seconds / n * 1e6:.1f} µs |", flush=True)


if __name__ == "__main__":
    main()
