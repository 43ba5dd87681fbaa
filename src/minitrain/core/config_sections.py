"""The run configuration's schema: one small dataclass per section, `TrainConfig` composed of them, and the
config hash.

Every field has two names: its place in the sections (`optim.lr_max`, `experiment.injection.step`) and a flat
name (`lr_max`, `injection_step`), the one the course's commands, `cfg.<name>` reads, `to_dict()` and every
run's config.yaml use. `FLAT_NAMES` is the one table between the two, generated from the sections: a section's
`FLAT_PREFIX` plus the field's name (`kind` is the prefix alone: `experiment.injection.kind` is `injection`).

The hash (versioned, docs/metrics.md "The config hash"): version 1 is the rule of the flat config, frozen with its
field list (`HASH_V1_FIELDS`); a field added later is left out of the hash at its default by construction, so every
run made before it existed keeps its hash, stays "up to date" and resumable.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field, fields
from typing import Any

from minitrain.core.course import LAB_K, LAB_SEED


# Hash version 1's fields, in the order of the flat config they come from: to_dict() keeps this order (then any
# newer field in section order), so config.yaml and the manifest read as they always have.
HASH_V1_FIELDS = (
    "seed", "corpus_seed", "val_verbs", "vocab_size", "corpus_scale", "n_layer", "d_model", "n_head", "d_ff",
    "context", "init_std", "init_scale", "causal_mask", "qk_norm", "steps", "batch_size", "lr_max", "lr_min",
    "warmup_steps", "beta1", "beta2", "eps", "weight_decay", "grad_clip", "z_loss", "update_clip", "eval_every",
    "val_max_rows", "ckpt_every", "ckpt_keep_last", "ckpt_keep_steps", "telemetry", "spectral_every",
    "natural_signals", "threads", "numerics", "device", "precision", "preset", "progress", "log", "injection",
    "injection_step", "injection_scale", "injection_sentence", "injection_param", "injection_factor",
    "injection_span", "injection_mult", "injection_mode", "injection_rows", "injection_beta2", "injection_eps",
    "blind", "remedy", "remedy_step", "remedy_param", "remedy_zclip_z", "remedy_zclip_alpha", "remedy_zclip_warmup",
    "swap_steps", "swap_offset")
# Fields that never change the numbers a run produces (where it runs, how it reports).
# (`preset` only names where the other fields' defaults came from; the resolved fields are hashed.)
NON_NUMERIC_FIELDS = ("progress", "device", "blind", "preset", "ckpt_keep_last", "ckpt_keep_steps", "log")
# Hash version 1: these fields of HASH_V1_FIELDS came after the first runs, so they stay out of the hash while at
# their defaults. Frozen: a field added from now on is omitted at its default by being newer than HASH_V1_FIELDS.
HASH_OMIT_AT_DEFAULT = ("injection_span", "injection_mult", "injection_mode", "injection_rows", "injection_beta2",
                        "injection_eps",
                        "remedy", "remedy_step", "remedy_param", "remedy_zclip_z", "remedy_zclip_alpha", "remedy_zclip_warmup",
                        "corpus_scale", "precision", "swap_steps", "swap_offset", "qk_norm", "z_loss", "update_clip",
                        "natural_signals", "numerics")
HASH_VERSION = 1


@dataclass(frozen=True)
class ModelConfig:
    """The transformer (course defaults: ~130k parameters)."""
    FLAT_PREFIX = ""
    n_layer: int = 2
    d_model: int = 64
    n_head: int = 4
    d_ff: int = 256
    context: int = 32
    init_std: float = 0.02
    init_scale: float = 1.0  # multiplies every weight at init (the break-it lab's "weights x100")
    causal_mask: bool = True  # False = the break-it lab's all-ones mask (padding still masked)
    qk_norm: bool = False  # LayerNorm on each head's queries and keys before RoPE (Wortsman et al. 2023)


@dataclass(frozen=True)
class OptimConfig:
    """AdamW, its schedule and clipping."""
    FLAT_PREFIX = ""
    steps: int = 2000
    lr_max: float = 3e-4  # the course quotes 3e-4 and 3e-3; 3e-3 memorises the split and val loss climbs
    lr_min: float = 3e-5
    warmup_steps: int = 100  # 0 = the break-it lab's "no warmup"
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1
    grad_clip: float = 1.0  # global L2-norm clipping; 0 (or none / off) = no clipping
    z_loss: float = 0.0  # coefficient of the auxiliary z-loss, c * mean(logsumexp(logits)^2) (PaLM: 1e-4; 0 = off)
    update_clip: bool = False  # StableAdamW's update clipping: per tensor lr / max(1, RMS(g^2 / max(v_hat, eps^2)))


@dataclass(frozen=True)
class DataConfig:
    """The generated corpus, its tokenizer and the batches."""
    FLAT_PREFIX = ""
    corpus_seed: int = 42  # the generated corpus (kept apart from seed so seeds share one dataset)
    val_verbs: list[str] = field(default_factory=lambda: ["walk", "talk", "want", "see"])
    vocab_size: int = 512
    corpus_scale: int = 1  # >1: a wider grammar and corpus_scale x the rows per cell (bigger presets)
    batch_size: int = 8


@dataclass(frozen=True)
class MetricsConfig:
    """What each metrics row measures and how often (the flat name `telemetry` is the level, so the section
    that holds it is called metrics)."""
    FLAT_PREFIX = ""
    eval_every: int = 100
    val_max_rows: int = 256  # fixed validation subset (every k-th row), so evaluation stays cheap
    telemetry: str = "full"  # full | basic (basic: no per-parameter stats, no spectral norms)
    spectral_every: int = 50  # largest singular value of each matrix every N steps (0 = never)
    natural_signals: bool = False  # attention logits and entropy, log Z of the output, on detail steps (full only)


@dataclass(frozen=True)
class CheckpointConfig:
    """How often checkpoints are written and which stay (docs/reliability.md)."""
    FLAT_PREFIX = "ckpt_"
    every: int = 100
    keep_last: int = 2  # the last N while running (0 = keep every checkpoint)
    keep_steps: list[int] = field(default_factory=lambda: [LAB_K])  # fork points F: what an injection at F forks from


@dataclass(frozen=True)
class RuntimeConfig:
    """Where and how the run executes and reports."""
    FLAT_PREFIX = ""
    threads: int = 1  # torch CPU threads; fixed so results do not depend on the machine
    # native: the kernels this CPU offers (bytes equal per platform fingerprint); portable: ATen's scalar kernels,
    # MKL's CBWR=COMPATIBLE and oneDNN off, chosen before torch's first kernel (core/numerics.py, docs/metrics.md)
    numerics: str = "native"
    device: str = "cpu"  # cpu | cuda | auto (auto: cuda when PyTorch sees a GPU)
    precision: str = "fp32"  # fp32 | bf16 (bf16 autocast of the training forward; GPU only)
    progress: bool = True
    log: str = "jsonl"  # metrics sinks besides metrics.jsonl: jsonl | tensorboard | mlflow, comma-separated (run/sinks.py)


@dataclass(frozen=True)
class InjectionConfig:
    """The fault injected at step K (the lab's maybe_inject knob; core/injections.py, docs/diagnosis.md)."""
    FLAT_PREFIX = "injection_"
    kind: str = "none"
    step: int = LAB_K
    scale: float = 50.0
    sentence: str = "She has written the letter."
    param: str = "lm_head.bias"
    factor: float = 100.0
    span: int = 20  # lr_spike / stuck_loader / target_leak: steps it lasts from K (0 = to the end)
    mult: float = 10.0  # lr_spike: the LR multiplier
    mode: str = "random"  # corrupt_batch: random | shift | mismatch
    rows: int = 0  # corrupt_batch: rows corrupted (0 = every row)
    beta2: float = 0.999  # adam_setting: AdamW's beta2 from K on
    eps: float = 1e-8  # adam_setting: AdamW's eps from K on


@dataclass(frozen=True)
class RemedyConfig:
    """The fix a stability-check leaf prescribes, applied inside the training step (core/remedy.py)."""
    FLAT_PREFIX = "remedy_"
    kind: str = "none"  # none | skip_batch | restore_moments | zclip
    step: int = -1  # skip_batch: the step not applied; restore_moments: the step it restores at
    param: str = ""  # restore_moments: the one tensor whose moments are restored ("" = every tensor)
    zclip_z: float = 2.5  # zclip: z-score of the pre-clip norm (vs its EMA) that counts as a spike
    zclip_alpha: float = 0.97  # zclip: EMA decay of the norm's mean and variance
    zclip_warmup: int = 25  # zclip: steps of statistics before it may act


@dataclass(frozen=True)
class ReplayConfig:
    """Counterfactual replays (lab/explain.py): at each of steps the step trains on the batch the data order
    serves at step + offset instead (after any batch injection), a pure function of (seed, step)."""
    FLAT_PREFIX = "swap_"
    steps: list[int] = field(default_factory=list)
    offset: int = 0


@dataclass(frozen=True)
class ExperimentConfig:
    """What the lab does to a run: the injection, the remedy, the replay swaps, and blind mode (blind.py: the
    run's files withhold its injection / break settings until the reveal)."""
    FLAT_PREFIX = ""
    blind: bool = False
    injection: InjectionConfig = field(default_factory=InjectionConfig)
    remedy: RemedyConfig = field(default_factory=RemedyConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)


def _is_section(f: dataclasses.Field) -> bool:
    return dataclasses.is_dataclass(f.default_factory)


@dataclass(init=False)
class TrainConfig:
    """A run's configuration: `seed` and `preset` at the top, every other field in its section. Built from flat
    names (`TrainConfig(lr_max=1e-3)`, the rest at their defaults); each flat name reads through a read-only
    alias (`cfg.lr_max` is `cfg.optim.lr_max`)."""
    seed: int = LAB_SEED  # model init and batch order
    preset: str = "course"  # where the defaults come from (config.PRESETS); explicit fields override it
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    data: DataConfig = field(default_factory=DataConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)

    def __init__(self, **values: Any) -> None:
        unknown = [k for k in values if k not in FLAT_NAMES]
        if unknown:
            raise TypeError(f"TrainConfig() got an unexpected keyword argument {unknown[0]!r}")
        for f in fields(TrainConfig):
            setattr(self, f.name, _build_section(f.default_factory, f.name, values) if _is_section(f)
                    else values.get(f.name, f.default))

    # ---- derived ----
    def to_dict(self) -> dict[str, Any]:
        """Every field by its flat name, in the order config.yaml and the manifest have always had."""
        return {name: _copied(getattr(self, name)) for name in FLAT_NAMES}

    def to_sections(self) -> dict[str, Any]:
        """Every field in its section (the sectioned YAML form)."""
        return dataclasses.asdict(self)

    def hash(self, exclude: tuple[str, ...] = NON_NUMERIC_FIELDS) -> str:
        """The config hash, version 1: sha256 of the sorted JSON of the flat fields without EXCLUDE (default:
        the non-numeric ones), each field of HASH_OMIT_AT_DEFAULT or newer than HASH_V1_FIELDS left out while
        at its course default; the first 16 hex digits."""
        d = {k: v for k, v in self.to_dict().items()
             if k not in exclude and not (omitted_at_default(k) and v == COURSE_DEFAULTS[k])}
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]

    def trunk_hash(self) -> str:
        """Hash of everything but the injection: runs with equal trunk hashes agree before step K."""
        return self.hash(exclude=NON_NUMERIC_FIELDS + INJECTION_FIELDS)

    def replace(self, **changes: Any) -> "TrainConfig":
        """A copy with CHANGES (flat names) applied."""
        return TrainConfig(**{**self.to_dict(), **changes})


def _copied(value: Any) -> Any:
    return list(value) if isinstance(value, list) else value


def _build_section(cls: type, path: str, values: dict[str, Any]) -> Any:
    kwargs = {}
    for f in fields(cls):
        dotted = f"{path}.{f.name}"
        if _is_section(f):
            kwargs[f.name] = _build_section(f.default_factory, dotted, values)
        elif DOTTED_TO_FLAT[dotted] in values:
            kwargs[f.name] = values[DOTTED_TO_FLAT[dotted]]
    return cls(**kwargs)


def _walk(cls: type, path: str, prefix: str):
    """(dotted name, flat name, declared type, field) of every leaf field of CLS, sections first to last."""
    for f in fields(cls):
        dotted = f"{path}.{f.name}" if path else f.name
        if _is_section(f):
            yield from _walk(f.default_factory, dotted, f.default_factory.FLAT_PREFIX)
        else:
            yield dotted, (prefix.rstrip("_") if f.name == "kind" else prefix + f.name), f.type, f


def _section_paths(cls: type, path: str = ""):
    for f in fields(cls):
        if _is_section(f):
            dotted = f"{path}.{f.name}" if path else f.name
            yield dotted
            yield from _section_paths(f.default_factory, dotted)


_LEAVES = list(_walk(TrainConfig, "", ""))
# The section names (`model`, `experiment.injection`, ...), each a mapping in the sectioned YAML.
SECTIONS = tuple(_section_paths(TrainConfig))
_FLAT_OF = {flat: dotted for dotted, flat, _, _ in _LEAVES}
# flat name -> dotted name, the one alias table (to_dict's order)
FLAT_NAMES = {flat: _FLAT_OF[flat] for flat in (*HASH_V1_FIELDS, *(f for f in _FLAT_OF if f not in HASH_V1_FIELDS))}
# dotted name -> flat name, in section order
DOTTED_TO_FLAT = {dotted: flat for dotted, flat, _, _ in _LEAVES}
# flat name -> declared type ("int", "float", "bool", "str", "list[int]", "list[str]")
_TYPE_OF = {flat: typ for _, flat, typ, _ in _LEAVES}
FIELD_TYPES = {flat: _TYPE_OF[flat] for flat in FLAT_NAMES}
assert len(FLAT_NAMES) == len(_LEAVES) and not set(FLAT_NAMES) & set(SECTIONS), "two fields share a flat name"

# Fields that only describe the injection: two configs that differ only here share steps 0..K-1,
# which is what lets an injection run fork from its baseline instead of recomputing them.
INJECTION_FIELDS = tuple(flat for flat, dotted in FLAT_NAMES.items() if dotted.startswith("experiment.injection."))


def omitted_at_default(name: str) -> bool:
    """Whether field NAME stays out of the hash while at its course default (hash version 1's rule)."""
    return name in HASH_OMIT_AT_DEFAULT or name not in HASH_V1_FIELDS


class FlatAlias:
    """`cfg.<flat name>`: reads the field in its section; on the class, its course default. Read-only: a change
    is `cfg.replace(name=value)`."""

    def __init__(self, flat: str, dotted: str, default: Any) -> None:
        self.flat, self.parts, self.default = flat, dotted.split("."), default

    def __get__(self, obj: Any, owner: type) -> Any:
        if obj is None:
            return self.default() if callable(self.default) else self.default
        for part in self.parts:
            obj = getattr(obj, part)
        return obj

    def __set__(self, obj: Any, value: Any) -> None:
        raise AttributeError(f"TrainConfig.{self.flat} is read-only (it is {'.'.join(self.parts)}); "
                             f"use cfg.replace({self.flat}=...)")


for _dotted, _flat, _, _f in _LEAVES:
    if "." in _dotted:
        setattr(TrainConfig, _flat, FlatAlias(_flat, _dotted, _f.default_factory
                                              if _f.default is dataclasses.MISSING else _f.default))

COURSE_DEFAULTS = TrainConfig().to_dict()
assert set(HASH_V1_FIELDS) <= set(FLAT_NAMES), "a field of hash version 1 was renamed: old hashes would change"
