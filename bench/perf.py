"""Performance bench (issue 14): the project's training step against a reference GPT step, the cost of the
default telemetry, and the lab's wall time against four sequential bare runs.

    python bench/perf.py step [--rounds 9] [--steps-per-block 100] [--before SRC]
    python bench/perf.py lab [--rounds 2]
    python bench/perf.py procs [--rounds 2]
    python bench/perf.py explore [--rounds 2]
    python bench/perf.py numerics [--rounds 5] [--steps 500]
    python bench/perf.py flops [--rounds 5] [--steps 200] [--n 2048]

`step` builds six loops in ONE process and runs them interleaved step by step (each round: n steps, every
loop taking each step in turn, the order rotated every step), timing every step:
  reference  a plain GPT written here with nanoGPT's shapes and training step (learned positions, pre-norm
             blocks, GELU MLP, tied head, `is_causal` attention, AdamW with decay on matrices only (not
             fused: nanoGPT fuses on CUDA only), clip 1.0), timed twice: at the course shape in nanoGPT's
             own data regime (B 8 windows of 32 tokens of the training text laid end to end: the target
             comparison), and fed the project's own batches (each trimmed to its longest row; targets
             outside the loss mask ignored) so both compute on the same tokens; its batches are prepared
             before the clock starts
  bare       the project's model, optimizer and batches with nothing else (what `train_step` costs
             without telemetry, metrics, validation or checkpoints)
  default    the project's loop exactly as a default run drives it (full telemetry, a metrics row every
             step, validation every 100 steps, a checkpoint every 100, spectral norms every 50)
  telemetry  the same loop with validation and checkpoints switched off: the default telemetry (and its
             metrics row every step, written as `minitrain train` writes it) against the bare step, the
             issue's 1.15x target
  natural    the telemetry loop with `natural_signals` on (docs/natural-instabilities.md)
  before     with `--before SRC` (another checkout's src folder, e.g. a worktree of main): that code's
             telemetry loop, imported beside this checkout's in the same process (its modules are put in
             sys.modules around each of its steps, outside the clock) and interleaved with the others: the
             telemetry's cost before and after a change, under the same load
Each ratio is taken per round, then the median over rounds (the shared machine's load drifts). Times are
the process's CPU time (one torch thread: other jobs' share of the cores does not count) and wall time.

`lab` times the whole lab (`just lab` = `minitrain lab`: baseline, the three injections, report, index) in a fresh folder
against four sequential bare 2000-step runs (each a fresh process: import, data, 2000 bare steps), rounds
interleaved, and prints the median of the per-round ratios.

`procs` times, as a user times them (wall clock of whole processes, one after another, the order rotated
every round), a nanoGPT process (the reference GPT step above at the course shape: imports, data, model,
2000 steps, one torch thread like minitrain's runs), a default `minitrain train` run (2000 steps, full telemetry, validation, checkpoints, its page)
and `minitrain lab`; the issue's targets are the run against one nanoGPT process (<= 0.9x) and the lab
against four of them one after another (4x the one measured in the same round; <= 0.4x).

`explore` sweeps a fixed subset of `minitrain explore`'s default grid (2 baselines of 750 steps and 4
cells of 250 steps after K, at the lab's lr and batch: clip course and off, A x50 and B) from an empty
folder, each sweep a new interpreter, arms interleaved (order rotated every round): this checkout as it
runs (workers forked from the sweep's already-imported process), this checkout with every run a new
interpreter (multiprocessing's spawn: each run imports torch again), and with `--before SRC` another
checkout's code (e.g. a worktree of main) as it runs.

`numerics` times `minitrain train` (the default config, `--steps` steps) with `numerics=native` and
`numerics=portable` (core/numerics.py), each a whole new process, the order rotated every round: the ratio of
the runs' own training time (results.json's seconds_this_session: steps, telemetry, validation, checkpoints;
not the imports) per round, then the median; the portable mode becomes the default only at <= 1.05x.

`flops` puts the step against the machine's limit: the forward+backward FLOPs of one step (counted from the
config by `step_flops`: every matrix product, attention's two included, backward twice the forward) over its
CPU time, against the FLOP rate of a large fp32 `torch.mm` (n x n, 2n^3 FLOPs) on the same single torch thread;
each round times the matmul and then `--steps` steps of each loop (bare, default telemetry, the reference at
the course shape), interleaved step by step; medians over rounds.
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------------------------------------------
# The reference: a plain GPT step with nanoGPT's shapes and optimizer (written here)
# ---------------------------------------------------------------------------------------------------


class RefBlock(nn.Module):
    def __init__(self, d: int, n_head: int, d_ff: int):
        super().__init__()
        self.n_head = n_head
        self.ln1, self.ln2 = nn.LayerNorm(d, bias=False), nn.LayerNorm(d, bias=False)
        self.qkv, self.out = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.fc, self.down = nn.Linear(d, d_ff, bias=False), nn.Linear(d_ff, d, bias=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.down(F.gelu(self.fc(self.ln2(x))))


class RefGPT(nn.Module):
    def __init__(self, vocab: int, n_layer: int, d: int, n_head: int, d_ff: int, block: int):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList(RefBlock(d, n_head, d_ff) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d, bias=False)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith(("out.weight", "down.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


def course_shape_batches(data, cfg, count: int) -> list:
    """nanoGPT's own data regime at the course shape: B windows of `context` tokens at random offsets of the
    training split's tokens laid end to end (every position a target, nothing padded)."""
    stream = torch.cat([row[:n] for row, n in zip(data.train.ids, data.train.lengths.tolist())])
    g = torch.Generator().manual_seed(cfg.seed)
    out = []
    for _ in range(count):
        ix = torch.randint(len(stream) - cfg.context - 1, (cfg.batch_size,), generator=g)
        out.append((torch.stack([stream[i:i + cfg.context] for i in ix]),
                    torch.stack([stream[i + 1:i + 1 + cfg.context] for i in ix])))
    return out


def reference_loop(cfg, batches):
    torch.manual_seed(cfg.seed)
    model = RefGPT(cfg.vocab_size, cfg.n_layer, cfg.d_model, cfg.n_head, cfg.d_ff, cfg.context)
    groups = [{"params": [p for p in model.parameters() if p.dim() >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=cfg.lr_max, betas=(cfg.beta1, cfg.beta2))  # nanoGPT on a CPU: not fused
    # (x, y) pairs as given, or the project's batches with targets outside the loss mask set to -1 (ignored);
    # prepared before timing
    data = [b if isinstance(b, tuple) else (b.x, torch.where(b.loss_mask > 0, b.y, -1)) for b in batches]

    def steps(start: int, stop: int) -> None:
        from minitrain import loop

        for step in range(start, stop):
            x, y = data[step % len(data)]
            for group in opt.param_groups:
                group["lr"] = loop.lr_at(step, cfg)
            loss = model(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()

    return steps


# ---------------------------------------------------------------------------------------------------
# The project's step, bare and as a default run drives it
# ---------------------------------------------------------------------------------------------------


def bare_loop(cfg):
    """The project's model, optimizer, loss and batches with nothing else: no telemetry, metrics, eval,
    checkpoints (`train_step` less what it measures and writes)."""
    from minitrain import loop

    run = loop.build_run(cfg)
    model, opt = run.model, run.opt
    model.record_activations = False
    params = list(model.parameters())

    def steps(start: int, stop: int) -> None:
        for step in range(start, stop):
            batch = run.data.train_batch(step, cfg.batch_size, cfg.seed)
            for group in opt.param_groups:
                group["lr"] = loop.lr_at(step, cfg)
            loss, _ = loop.masked_loss(model(batch.x, batch.key_pad, causal=cfg.causal_mask, at=batch.target_index()),
                                       batch)
            for p in params:  # as train_step zeroes them
                p.grad = None
            loss.backward()
            loop.clip_grad_norm([p.grad for p in params], cfg.grad_clip)
            opt.step()

    return steps, run


def default_loop(cfg, folder: Path):
    """The real loop writing a real run folder, as `minitrain train` drives it."""
    from minitrain import loop
    from minitrain.run import files as runfiles

    run = loop.build_run(cfg, folder)
    run.lock = runfiles.claim_run_dir(folder, force=True)
    # the writer as `minitrain train` opens it (a checkout whose loop has no `open_metrics` flushes every row)
    opener = getattr(loop, "open_metrics", runfiles.MetricsWriter)
    run.metrics = opener(folder / "metrics.jsonl")

    def steps(start: int, stop: int) -> None:
        loop.run_steps(run, start, stop_at=stop)

    return steps


def is_minitrain(module: str) -> bool:
    return module == "minitrain" or module.startswith("minitrain.")


@contextmanager
def modules_of(mods: dict):
    """`mods` (another checkout's minitrain modules) in sys.modules for the duration, this checkout's put
    back after; whatever the other code imports meanwhile is added to `mods`."""
    mine = {k: sys.modules.pop(k) for k in [k for k in sys.modules if is_minitrain(k)]}
    sys.modules.update(mods)
    try:
        yield
    finally:
        mods.update({k: sys.modules.pop(k) for k in [k for k in sys.modules if is_minitrain(k)]})
        sys.modules.update(mine)


def before_telemetry_loop(src: Path, overrides: list[str], folder: Path):
    """The telemetry loop (`default_loop` with validation and checkpoints off) of the checkout whose src
    folder is `src`, its config built by that code; returns (steps, its modules)."""
    mods: dict = {}
    sys.path.insert(0, str(src))
    try:
        with modules_of(mods):
            from minitrain.core.config import build_config

            steps = default_loop(build_config({}, overrides), folder)
    finally:
        sys.path.remove(str(src))
    if not Path(mods["minitrain"].__file__).resolve().is_relative_to(src):
        raise SystemExit(f"--before {src}: minitrain was not imported from there")
    return steps, mods


def load() -> str:
    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def bench_step(args) -> int:
    from minitrain.core.config import build_config

    n, rounds = args.steps_per_block, args.rounds
    total = n * (rounds + 1)
    cfg = build_config({}, ["progress=false", f"steps={max(total, 2000)}"])
    bare, run = bare_loop(cfg)
    batches = [run.data.train_batch(s, cfg.batch_size, cfg.seed) for s in range(total)]
    tmp = Path(tempfile.mkdtemp(prefix="minitrain-perf-"))
    try:
        return _bench_step(args, cfg, bare, run, batches, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _bench_step(args, cfg, bare, run, batches, tmp: Path) -> int:
    n, rounds = args.steps_per_block, args.rounds
    total = n * (rounds + 1)
    never = 10 ** 9
    telemetry_cfg = cfg.replace(eval_every=never, ckpt_every=never)
    before = f"the telemetry loop of --before {args.before}" if args.before else None
    loops = {"reference GPT step, the project's batches (same tokens)": reference_loop(cfg, batches),
             "minitrain bare step": bare,
             "minitrain default run (full telemetry, metrics, validation, checkpoints)": default_loop(cfg, tmp / "run"),
             f"reference GPT step at the course shape (B {cfg.batch_size}, T {cfg.context})":
                 reference_loop(cfg, course_shape_batches(run.data, cfg, total)),
             "minitrain default telemetry and metrics rows (no validation pass, no checkpoints)":
                 default_loop(telemetry_cfg, tmp / "telemetry"),
             "the same with natural_signals on (attention logits and entropy, log Z on detail steps)":
                 default_loop(telemetry_cfg.replace(natural_signals=True), tmp / "natural")}
    context = dict.fromkeys(loops, None)  # the modules to put in place around a loop's steps (None: this code's)
    if before:
        loops[before], context[before] = before_telemetry_loop(
            Path(args.before).resolve(), ["progress=false", f"steps={max(total, 2000)}", f"eval_every={never}",
                                          f"ckpt_every={never}"], tmp / "before")
    load0 = load()

    def in_context(name: str):
        return nullcontext() if context[name] is None else modules_of(context[name])

    for name, fn in loops.items():  # warm up: one block each
        with in_context(name):
            fn(0, n)
    times: dict[str, list[float]] = {k: [] for k in loops}  # CPU ms per step of this process
    walls: dict[str, list[float]] = {k: [] for k in loops}
    names = list(loops)
    for r in range(rounds):
        start = n * (r + 1)
        cpu, wall = dict.fromkeys(names, 0.0), dict.fromkeys(names, 0.0)
        # interleaved step by step (the machine's speed drifts within a block of steps), the order rotated
        # every step; each loop's CPU time summed over the round's n steps
        for step in range(start, start + n):
            k = step % len(names)
            for name in names[k:] + names[:k]:
                with in_context(name):  # outside the clock
                    c0, t0 = time.process_time(), time.perf_counter()
                    loops[name](step, step + 1)
                    cpu[name] += time.process_time() - c0
                    wall[name] += time.perf_counter() - t0
        for name in names:
            times[name].append(cpu[name] / n * 1000)
            walls[name].append(wall[name] / n * 1000)
        print(f"round {r + 1}/{rounds}", file=sys.stderr)
    ref, bare_t, default_t, course, telemetry_t, natural_t = (times[k] for k in list(loops)[:6])

    def ratio(a, b) -> float:
        return statistics.median(x / y for x, y in zip(a, b))

    print(f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.machine()}, {os.cpu_count()} cores, "
          f"{torch.get_num_threads()} torch thread(s), torch {torch.__version__}; load average {load0} -> {load()}; "
          f"{rounds} interleaved rounds of {n} steps after one warm-up block\n")
    print("| loop | CPU ms/step | vs reference | vs bare | wall ms/step | wall vs reference | wall vs bare |")
    print("|---|---|---|---|---|---|---|")
    wref, wbare = (walls[k] for k in list(loops)[:2])
    for name, t in times.items():
        w = walls[name]
        print(f"| {name} | {statistics.median(t):.2f} | {ratio(t, ref):.3f}x | {ratio(t, bare_t):.3f}x "
              f"| {statistics.median(w):.2f} | {ratio(w, wref):.3f}x | {ratio(w, wbare):.3f}x |")
    wcourse = walls[list(loops)[3]]
    print(f"\nbare step / reference step at the course shape: {ratio(bare_t, course):.3f}x CPU, "
          f"{ratio(walls[list(loops)[1]], wcourse):.3f}x wall (target <= 0.90x)")
    print(f"bare step / reference step on the same tokens: {ratio(bare_t, ref):.3f}x CPU, "
          f"{ratio(walls[list(loops)[1]], wref):.3f}x wall")
    spread = sorted(x / y for x, y in zip(telemetry_t, bare_t))
    print(f"per-round telemetry / bare: {', '.join(f'{r:.3f}' for r in spread)}")
    print(f"default telemetry and metrics / bare step: {ratio(telemetry_t, bare_t):.3f}x CPU, "
          f"{ratio(walls[list(loops)[4]], wbare):.3f}x wall (target <= 1.15x)")
    if before:
        spread = sorted(x / y for x, y in zip(times[before], bare_t))
        print(f"per-round before / bare: {', '.join(f'{r:.3f}' for r in spread)}")
        print(f"before's telemetry and metrics / bare step: {ratio(times[before], bare_t):.3f}x CPU, "
              f"{ratio(walls[before], wbare):.3f}x wall; this checkout's / before's: "
              f"{ratio(telemetry_t, times[before]):.3f}x CPU")
    print(f"natural_signals on / bare step: {ratio(natural_t, bare_t):.3f}x CPU, "
          f"{ratio(walls[list(loops)[5]], wbare):.3f}x wall")
    print(f"default run (telemetry, metrics, validation every {cfg.eval_every} steps, checkpoints every "
          f"{cfg.ckpt_every}) / bare step: {ratio(default_t, bare_t):.3f}x CPU, "
          f"{ratio(walls[list(loops)[2]], wbare):.3f}x wall")
    return 0


def bare_run(args) -> int:
    """One bare 2000-step run as a fresh process does it: imports, data, model, 2000 bare steps."""
    from minitrain.core.config import build_config

    steps, _ = bare_loop(build_config({}, ["progress=false"]))
    steps(0, 2000)
    return 0


def minitrain_command(argv: list[str]) -> None:
    """One `minitrain` command in this process (a new interpreter: the runner's jobs here are not forked), as
    `python -m minitrain ARGV` runs it; the process ends with the command's exit code."""
    from minitrain import cli

    sys.exit(cli.main(argv))


def bench_lab(args) -> int:
    """The lab (`just lab`: minitrain lab, report, index) in a fresh folder against four sequential bare
    2000-step runs, each a fresh process; rounds interleaved, the median of the per-round ratios. Every
    process runs on lab/runner.py, one at a time."""
    from minitrain.lab import runner

    here = Path(__file__).resolve()
    # the children import this checkout's minitrain
    os.environ["PYTHONPATH"] = str(here.parents[1] / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")
    labs, bares, rows = [], [], []
    load0 = load()

    def timed(jobs: list) -> float:
        t0 = time.perf_counter()
        failed = [j for j in runner.run_jobs(jobs, runner.LocalProcesses(1, fork=False)) if j.failed]
        if failed:
            raise SystemExit(f"{failed[0].name} failed: {failed[0].error()}")
        return time.perf_counter() - t0

    for r in range(args.rounds):
        exp = Path(tempfile.mkdtemp(prefix="minitrain-lab-")) / "experiments"

        def run_lab() -> float:  # `just lab`: runs, report, index
            return timed([runner.Job("lab", call=minitrain_command, args=(["lab", "--experiments", str(exp)],))])

        def run_bare() -> float:  # each a new interpreter: imports, data, model, 2000 steps
            return timed([runner.Job(f"bare-{i}", call=bare_run, args=(None,)) for i in range(4)])

        if r % 2 == 0:  # alternate the order between rounds
            lab, bare = run_lab(), run_bare()
        else:
            bare, lab = run_bare(), run_lab()
        labs.append(lab)
        bares.append(bare)
        rows.append(f"| {r + 1} | {lab:.1f} | {bare:.1f} | {lab / bare:.3f}x | {load()} |")
        print(f"round {r + 1}/{args.rounds}: lab {lab:.1f} s, four bare runs {bare:.1f} s", file=sys.stderr)
    print(f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__}; load average {load0} at the start\n")
    print("| round | lab wall (s) | four bare 2000-step runs (s) | ratio | load after |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    ratio = statistics.median(a / b for a, b in zip(labs, bares))
    print(f"\nlab / four sequential bare runs: {ratio:.3f}x (median of {args.rounds} rounds; target <= 0.60x)")
    return 0


def ref_run(args) -> int:
    """One nanoGPT process: imports (done), data, the reference model at the course shape, 2000 steps, on
    one torch thread as every minitrain run (two threads on this shared 2-core machine spin: 260 CPU s)."""
    from minitrain.core.config import build_config
    from minitrain.core.data import prepare

    torch.set_num_threads(1)
    cfg = build_config({}, ["progress=false"])
    steps = reference_loop(cfg, course_shape_batches(prepare(cfg), cfg, cfg.steps))
    steps(0, cfg.steps)
    return 0


def children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed_jobs(jobs: list) -> tuple[float, float]:
    """Run the jobs one at a time, each a new interpreter; (wall seconds, CPU seconds of the children)."""
    from minitrain.lab import runner

    t0, c0 = time.perf_counter(), children_cpu()
    failed = [j for j in runner.run_jobs(jobs, runner.LocalProcesses(1, fork=False)) if j.failed]
    if failed:
        raise SystemExit(f"{failed[0].name} failed: {failed[0].error()}")
    return time.perf_counter() - t0, children_cpu() - c0


def bench_procs(args) -> int:
    from minitrain.lab import runner

    here = Path(__file__).resolve()
    os.environ["PYTHONPATH"] = str(here.parents[1] / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")
    load0, rows, got = load(), [], {"ref": [], "train": [], "lab": []}
    for r in range(args.rounds):
        tmp = Path(tempfile.mkdtemp(prefix="minitrain-procs-"))
        arms = {"ref": [runner.Job("nanogpt", call=ref_run, args=(None,))],
                "train": [runner.Job("train", call=minitrain_command,
                                     args=(["train", "--out", str(tmp / "run"), "--no-progress"],))],
                "lab": [runner.Job("lab", call=minitrain_command, args=(["lab", "--experiments", str(tmp / "experiments")],))]}
        order = list(arms)[r % 3:] + list(arms)[:r % 3]
        for name in order:
            got[name].append(timed_jobs(arms[name]))
        shutil.rmtree(tmp, ignore_errors=True)
        (rw, rc), (tw, tc), (lw, lc) = (got[k][-1] for k in ("ref", "train", "lab"))
        rows.append(f"| {r + 1} | {' > '.join(order)} | {rw:.1f} ({rc:.1f}) | {tw:.1f} ({tc:.1f}) | {lw:.1f} ({lc:.1f}) "
                    f"| {tw / rw:.3f}x | {lw / (4 * rw):.3f}x | {load()} |")
        print(f"round {r + 1}/{args.rounds}: {rows[-1]}", file=sys.stderr)
    print(f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__}; load average {load0} at the start\n")
    print("| round | order | nanoGPT process, wall s (CPU s) | minitrain train | minitrain lab | run / nanoGPT "
          "| lab / four nanoGPT | load after |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    run = statistics.median(t[0] / r[0] for t, r in zip(got["train"], got["ref"]))
    lab = statistics.median(t[0] / (4 * r[0]) for t, r in zip(got["lab"], got["ref"]))
    run_cpu = statistics.median(t[1] / r[1] for t, r in zip(got["train"], got["ref"]))
    lab_cpu = statistics.median(t[1] / (4 * r[1]) for t, r in zip(got["lab"], got["ref"]))
    print(f"\ndefault run / nanoGPT process: {run:.3f}x wall, {run_cpu:.3f}x CPU (target <= 0.9x)")
    print(f"lab / four nanoGPT processes: {lab:.3f}x wall, {lab_cpu:.3f}x CPU (target <= 0.4x)")
    return 0


def bench_numerics(args) -> int:
    import subprocess

    from minitrain.run import reader

    here = Path(__file__).resolve()
    env = {**os.environ, "PYTHONPATH": str(here.parents[1] / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    load0, rows, got = load(), [], {"native": [], "portable": []}
    for r in range(args.rounds):
        tmp = Path(tempfile.mkdtemp(prefix="minitrain-numerics-"))
        order = list(got)[r % 2:] + list(got)[:r % 2]
        for mode in order:
            out = tmp / mode
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "minitrain", "train", "--out", str(out), "--no-progress",
                            "--set", f"steps={args.steps}", "--set", f"numerics={mode}"], env=env, check=True,
                           stdout=subprocess.DEVNULL)
            wall = time.perf_counter() - t0
            got[mode].append((reader.results_of(out)["seconds_this_session"], wall))
        shutil.rmtree(tmp, ignore_errors=True)
        (nt, nw), (pt, pw) = got["native"][-1], got["portable"][-1]
        rows.append(f"| {r + 1} | {' > '.join(order)} | {nt:.2f} ({nw:.1f}) | {pt:.2f} ({pw:.1f}) | {pt / nt:.3f}x | {load()} |")
        print(f"round {r + 1}/{args.rounds}: {rows[-1]}", file=sys.stderr)
    print(f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__}, native kernels {torch.backends.cpu.get_cpu_capability()}; "
          f"{args.steps} steps of the default config; load average {load0} at the start\n")
    print("| round | order | native: training s (process wall s) | portable | portable / native | load after |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    ratio = statistics.median(p[0] / n[0] for p, n in zip(got["portable"], got["native"]))
    print(f"\nportable / native training time: median {ratio:.3f}x (default only at <= 1.05x)")
    return 0


# One explore sweep in a new interpreter: a fixed part of the default grid (the lab's lr and batch, clip
# course and off, A x50 and B), the workers forked (the runner's default) or each a new interpreter
EXPLORE_DRIVER = """
import sys
from pathlib import Path
from minitrain.lab import explore, runner
explore.GRIDS["perf-subset"] = (explore.Slice((3e-4,), (8,), ("course", "off"), (explore.scale(50), explore.BAD_BATCH)),)
if sys.argv[2] == "spawn":
    runner.can_fork = lambda: False
explore.run_explore(Path(sys.argv[1]), "perf-subset", jobs=int(sys.argv[3]) if sys.argv[3] != "0" else None,
                    log=lambda line: None)
"""


def bench_explore(args) -> int:
    """Interleaved arms, each an explore sweep of the same subset from an empty folder in a new interpreter:
    `before` (the checkout whose src is --before, as it runs by default), this checkout with each run a new
    interpreter, this checkout as it runs by default (workers forked). Wall and CPU (the sweep's process and
    its children)."""
    import subprocess

    here = Path(__file__).resolve().parents[1] / "src"
    arms = {"this checkout, runs forked": (here, "fork"), "this checkout, each run a new interpreter": (here, "spawn")}
    if args.before:
        arms = {"before (--before), as it runs": (Path(args.before).resolve(), "fork"), **arms}
    names, got, rows, load0 = list(arms), {a: [] for a in arms}, [], load()
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            src, how = arms[name]
            out = Path(tempfile.mkdtemp(prefix="minitrain-explore-")) / "explore"
            env = {**os.environ, "PYTHONPATH": str(src)}
            t0, c0 = time.perf_counter(), children_cpu()
            subprocess.run([sys.executable, "-c", EXPLORE_DRIVER, str(out), how, str(args.jobs or 0)], env=env,
                           check=True)
            got[name].append((time.perf_counter() - t0, children_cpu() - c0))
            shutil.rmtree(out.parent, ignore_errors=True)
            print(f"round {r + 1}/{args.rounds} {name}: {got[name][-1][0]:.1f} s wall, {got[name][-1][1]:.1f} CPU s "
                  f"(load {load()})", file=sys.stderr)
        rows.append(f"| {r + 1} | " + " | ".join(f"{got[a][-1][0]:.1f} ({got[a][-1][1]:.1f})" for a in names)
                    + f" | {load()} |")
    ref = names[0]
    print(f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.machine()}, {os.cpu_count()} cores, "
          f"{args.jobs or os.cpu_count()} workers; load average {load0} at the start; order rotated every round\n")
    print("| round | " + " | ".join(f"{a}: wall s (CPU s)" for a in names) + " | load after |")
    print("|---|" + "---|" * len(names) + "---|")
    print("\n".join(rows))
    for a in names[1:]:
        wall = statistics.median(x[0] / y[0] for x, y in zip(got[a], got[ref]))
        cpu = statistics.median(x[1] / y[1] for x, y in zip(got[a], got[ref]))
        print(f"\n{a} / {ref}: {wall:.3f}x wall, {cpu:.3f}x CPU (median of {args.rounds} rounds)")
    return 0


# ---------------------------------------------------------------------------------------------------
# The step against the machine's limit
# ---------------------------------------------------------------------------------------------------


def step_flops(cfg, tokens: int, targets: int, seq: int, rows: int) -> int:
    """Forward+backward FLOPs of one step of the course model: `rows` sequences of `seq` positions (`tokens`
    = rows x seq through the blocks), the output head on `targets` positions. Matrix products only (2 FLOPs
    a multiply-add); the attention scores and their weighted sum over the full seq x seq square (the CPU
    kernel computes the masked half too); backward = 2x forward (input and weight gradients). Norms, GELU,
    softmax, the loss and AdamW are elementwise: under 2% of the total at this shape, not counted."""
    d, f = cfg.d_model, cfg.d_ff
    per_layer = 2 * tokens * (d * 3 * d + d * d + 2 * d * f) + 2 * 2 * rows * seq * seq * d
    forward = cfg.n_layer * per_layer + 2 * targets * d * cfg.vocab_size
    return 3 * forward


def peak_mm(n: int, repeats: int = 3) -> float:
    """FLOP/s of an n x n fp32 torch.mm on this process's torch threads (CPU time; the best of `repeats`)."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    torch.mm(a, b)  # warm up
    best = math.inf
    for _ in range(repeats):
        c0 = time.process_time()
        torch.mm(a, b)
        best = min(best, time.process_time() - c0)
    return 2 * n ** 3 / best


def bench_flops(args) -> int:
    from minitrain.core.config import build_config

    rounds, n = args.rounds, args.steps
    total = n * (rounds + 1)
    cfg = build_config({}, ["progress=false", f"steps={max(total, 2000)}", "eval_every=1000000000",
                            "ckpt_every=1000000000"])
    bare, run = bare_loop(cfg)  # numerics.apply: cfg.threads (1) torch threads, as every run
    batches = [run.data.train_batch(s, cfg.batch_size, cfg.seed) for s in range(total)]
    full = cfg.batch_size * cfg.context
    counts = {"nominal": step_flops(cfg, full, full, cfg.context, cfg.batch_size),
              "project": statistics.mean(step_flops(cfg, b.x.numel(), len(b.target_index()), b.x.shape[1],
                                                    b.x.shape[0]) for b in batches)}
    tmp = Path(tempfile.mkdtemp(prefix="minitrain-flops-"))
    try:
        loops = {"minitrain bare step": (bare, counts["project"]),
                 "minitrain default telemetry step": (default_loop(cfg, tmp / "run"), counts["project"]),
                 f"reference GPT step at the course shape (B {cfg.batch_size}, T {cfg.context})":
                     (reference_loop(cfg, course_shape_batches(run.data, cfg, total)), counts["nominal"])}
        load0 = load()
        for fn, _ in loops.values():
            fn(0, n)
        peaks, cpu = [], {k: [] for k in loops}
        for r in range(rounds):
            peaks.append(peak_mm(args.n))
            spent = dict.fromkeys(loops, 0.0)
            for step in range(n * (r + 1), n * (r + 2)):
                names = list(loops)[step % 3:] + list(loops)[:step % 3]
                for name in names:
                    c0 = time.process_time()
                    loops[name][0](step, step + 1)
                    spent[name] += time.process_time() - c0
            for name in loops:
                cpu[name].append(spent[name] / n)
            print(f"round {r + 1}/{rounds}: peak {peaks[-1] / 1e9:.1f} GFLOP/s", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    peak = statistics.median(peaks)
    print(f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.machine()}, "
          f"{torch.get_num_threads()} torch thread(s), kernels {torch.backends.cpu.get_cpu_capability()}, "
          f"torch {torch.__version__}; load average {load0} -> {load()}; {rounds} rounds of {n} steps\n")
    print(f"peak: {args.n}x{args.n} fp32 torch.mm, {peak / 1e9:.1f} GFLOP/s (median of rounds; best of 3 each)")
    print(f"step FLOPs (forward+backward, matrix products): {counts['nominal'] / 1e6:.1f} M at the course shape "
          f"({full} tokens, head on all); {counts['project'] / 1e6:.1f} M on the project's batches (trimmed to "
          f"the longest row, head on targets); {cfg.steps} steps: {counts['nominal'] * 2000 / 1e12:.3f} TFLOP "
          f"at the course shape\n")
    print("| loop | CPU ms/step | GFLOP/s achieved | fraction of peak |")
    print("|---|---|---|---|")
    for name, (_, flops) in loops.items():
        fractions = [flops / t / p for t, p in zip(cpu[name], peaks)]
        t = statistics.median(cpu[name])
        print(f"| {name} | {t * 1000:.2f} | {flops / t / 1e9:.2f} | {statistics.median(fractions):.1%} |")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("step", help="reference vs bare vs default step, interleaved in one process")
    s.add_argument("--rounds", type=int, default=9)
    s.add_argument("--steps-per-block", type=int, default=100,
                   help="a multiple of eval_every and ckpt_every (100): every block does the same work")
    s.add_argument("--before", metavar="SRC", help="another checkout's src folder (e.g. a worktree of main): its "
                                                   "telemetry loop as a seventh loop")
    s.set_defaults(func=bench_step)
    lab = sub.add_parser("lab", help="the whole lab's wall time against four sequential bare 2000-step runs")
    lab.add_argument("--rounds", type=int, default=3)
    lab.set_defaults(func=bench_lab)
    procs = sub.add_parser("procs", help="a default run and the lab against nanoGPT processes, as a user times them")
    procs.add_argument("--rounds", type=int, default=3)
    procs.set_defaults(func=bench_procs)
    ex = sub.add_parser("explore", help="a subset of explore's grid, workers forked vs new interpreters")
    ex.add_argument("--rounds", type=int, default=2)
    ex.add_argument("--jobs", type=int, default=None, help="worker processes (default: one per core)")
    ex.add_argument("--before", metavar="SRC", help="another checkout's src folder (e.g. a worktree of main) as "
                                                    "the reference arm")
    ex.set_defaults(func=bench_explore)
    num = sub.add_parser("numerics", help="a run with numerics=portable against numerics=native, whole processes")
    num.add_argument("--rounds", type=int, default=5)
    num.add_argument("--steps", type=int, default=500)
    num.set_defaults(func=bench_numerics)
    fl = sub.add_parser("flops", help="the step's achieved FLOP/s against a large matmul's on the same thread")
    fl.add_argument("--rounds", type=int, default=5)
    fl.add_argument("--steps", type=int, default=200, help="steps of each loop per round")
    fl.add_argument("--n", type=int, default=2048, help="the peak's matrix size")
    fl.set_defaults(func=bench_flops)
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
