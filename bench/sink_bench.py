"""What the metrics sinks (run/sinks.py) cost against metrics.jsonl alone.

    python bench/sink_bench.py [--steps 400] [--repeats 3]

1. Per row: the rows of one run (the lab's config, full telemetry, `--steps` steps, trained once into a
   temporary folder) written again through each sink alone: files.MetricsWriter (jsonl), TensorBoardSink,
   MLflowSink (a local file store). CPU time of the process (time.process_time: the machine is shared, wall
   time is noise), median of the repeats, per row; a row carries ~210 scalars with per-tensor telemetry.
2. End to end: the same run trained with log=jsonl, log=tensorboard and log=mlflow, CPU seconds per step of
   the training session (the sinks' opening included).

Prints the markdown for docs/benchmarks.md, section "Metrics sinks".
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from minitrain import trainer
from minitrain.core.config import build_config
from minitrain.run import files, reader, sinks


def per_row(rows: list[dict], make, repeats: int) -> float:
    """Median CPU seconds per row of writing every row through the sink `make(folder)` builds."""
    out = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            sink = make(Path(tmp))
            t0 = time.process_time()
            for row in rows:
                sink.write(row)
            sink.close()
            out.append((time.process_time() - t0) / len(rows))
    return statistics.median(out)


def end_to_end(steps: int, log: str, root: Path) -> float:
    cfg = build_config({}, [f"steps={steps}", "progress=false", f"log={log}"])
    t0 = time.process_time()
    trainer.train(cfg, root / f"run-{log}", fork=False, force=True)
    return (time.process_time() - t0) / steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        end_to_end(50, "jsonl,tensorboard,mlflow", root / "warm-up")  # imports, corpus and tokenizer: paid once
        step_jsonl = end_to_end(args.steps, "jsonl", root)
        step_tb = end_to_end(args.steps, "tensorboard", root)
        step_ml = end_to_end(args.steps, "mlflow", root)
        rows = reader.read_metrics(root / "run-jsonl" / reader.METRICS)[0]
        scalars = statistics.mean(len(sinks.row_scalars(r)) for r in rows)
        jsonl = per_row(rows, lambda d: files.MetricsWriter(d / "metrics.jsonl"), args.repeats)
        tb = per_row(rows, lambda d: sinks.TensorBoardSink(d), args.repeats)
        ml = per_row(rows, lambda d: sinks.MLflowSink(d, {}), args.repeats)
    load = os.getloadavg()[0]
    print(f"Measured {time.strftime('%Y-%m-%d %H:%M')} UTC, load average {load:.1f}: the lab's config, {args.steps} "
          f"steps, full telemetry ({scalars:.0f} scalars per row on average); CPU time of the process.\n")
    print("| sink | per row, written alone (median of %d) | as a share of the jsonl run's step | training, CPU ms "
          "per step | vs jsonl alone |" % args.repeats)
    print("|---|---|---|---|---|")
    print(f"| jsonl (metrics.jsonl) | {jsonl * 1e3:.3f} ms | {100 * jsonl / step_jsonl:.1f}% | {step_jsonl * 1e3:.1f} | - |")
    for name, one, step in (("+ tensorboard", tb, step_tb), ("+ mlflow (file store)", ml, step_ml)):
        print(f"| {name} | {one * 1e3:.3f} ms | {100 * one / step_jsonl:.1f}% | {step * 1e3:.1f} | "
              f"{100 * (step / step_jsonl - 1):+.0f}% |")


if __name__ == "__main__":
    main()
