"""The run configuration: one typed dataclass, loadable from YAML, overridable with `--set key=value`.

Every field has a course default (see ../shared/course-notes.md). Validation turns any bad value into a
`UserError` whose message says what is wrong and how to fix it.
"""
from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from minitrain.core.course import LAB_K, LAB_SEED
from minitrain.core.errors import UserError

# Fields that only describe the injection: two configs that differ only here share steps 0..K-1,
# which is what lets an injection run fork from its baseline instead of recomputing them.
INJECTION_FIELDS = (
    "injection",
    "injection_step",
    "injection_scale",
    "injection_sentence",
    "injection_param",
    "injection_factor",
    "injection_span",
    "injection_mult",
    "injection_mode",
    "injection_rows",
    "injection_beta2",
    "injection_eps",
)
# Fields that never change the numbers a run produces (where it runs, how it reports).
# (`preset` only names where the other fields' defaults came from; the resolved fields are hashed.)
NON_NUMERIC_FIELDS = ("progress", "device", "blind", "preset", "ckpt_keep_last", "ckpt_keep_steps", "log")
# Where a run's metrics rows go (the `log` field, run/sinks.py): metrics.jsonl always, the others on request.
LOG_SINKS = ("jsonl", "tensorboard", "mlflow")
# Remedy fields (remedy.py), corpus_scale, precision, the replay swaps and the natural-instability options stay
# out of the hash while at their defaults, so every run made before they existed keeps its config hash (and
# stays resumable and "up to date").
HASH_OMIT_AT_DEFAULT = ("injection_span", "injection_mult", "injection_mode", "injection_rows", "injection_beta2",
                        "injection_eps",
                        "remedy", "remedy_step", "remedy_param", "remedy_zclip_z", "remedy_zclip_alpha", "remedy_zclip_warmup",
                        "corpus_scale", "precision", "swap_steps", "swap_offset", "qk_norm", "z_loss", "update_clip",
                        "natural_signals", "numerics")

# Named sets of defaults (`--preset NAME` or `preset: NAME`); any field given explicitly overrides them.
# Measured memory and step time of each: docs/benchmarks.md, "Devices and presets".
PRESETS: dict[str, dict[str, Any]] = {
    "course": {},  # the course's ~130k-parameter model and corpus: the field defaults below
    # ~3.4M parameters: still trains on CPU (see the measured step time)
    "medium": {"n_layer": 4, "d_model": 256, "n_head": 8, "d_ff": 1024, "context": 64, "vocab_size": 1024,
               "corpus_scale": 4, "batch_size": 16},
    # GPT-2-small shaped (12 x 768, 12 heads, d_ff 3072; ~86M parameters with this vocabulary): a GPU preset.
    # The template grammar caps BPE near 1050 tokens, so its vocabulary is 1024, not GPT-2's 50257.
    "gpt2-small-shaped": {"n_layer": 12, "d_model": 768, "n_head": 12, "d_ff": 3072, "context": 64,
                          "vocab_size": 1024, "corpus_scale": 8, "batch_size": 32},
    # The course model where clipping engages rarely, as in large-scale pretraining: 6.0 is about the 99th
    # percentile of the unclipped healthy run's pre-clip norm over the lab's 2000 steps (5.8; the course's 1.0
    # sits below every step's norm). Chosen from the regime map, not from any prediction: docs/regimes.md.
    "pretraining-like": {"grad_clip": 6.0},
}


# Upper bounds of the resource fields, checked before any work (a typo like batch_size=1e8 or threads=100000
# is a one-line error, not a hang or a crash). Each is far above the largest preset (gpt2-small-shaped).
MAX_SEED = 2**32 - 1
LIMITS = {"steps": 10_000_000, "batch_size": 65_536, "threads": 256, "n_layer": 128, "d_model": 16_384,
          "d_ff": 65_536, "n_head": 256, "context": 8_192, "vocab_size": 65_536, "corpus_scale": 64,
          "val_max_rows": 1_000_000}
MAX_PARAMS = 1_000_000_000


@dataclass
class TrainConfig:
    # reproducibility
    seed: int = LAB_SEED  # model init and batch order
    corpus_seed: int = 42  # the generated corpus (kept apart so seeds share one dataset)
    # corpus and tokenizer
    val_verbs: list[str] = field(default_factory=lambda: ["walk", "talk", "want", "see"])
    vocab_size: int = 512
    corpus_scale: int = 1  # >1: a wider grammar and corpus_scale x the rows per cell (bigger presets)
    # model (course defaults: ~130k parameters)
    n_layer: int = 2
    d_model: int = 64
    n_head: int = 4
    d_ff: int = 256
    context: int = 32
    init_std: float = 0.02
    init_scale: float = 1.0  # multiplies every weight at init (the break-it lab's "weights x100")
    causal_mask: bool = True  # False = the break-it lab's all-ones mask (padding still masked)
    qk_norm: bool = False  # LayerNorm on each head's queries and keys before RoPE (Wortsman et al. 2023)
    # optimisation
    steps: int = 2000
    batch_size: int = 8
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
    # telemetry and files
    eval_every: int = 100
    val_max_rows: int = 256  # fixed validation subset (every k-th row), so evaluation stays cheap
    ckpt_every: int = 100
    # checkpoint retention (run files): the last N while running (0 = keep every checkpoint), and for each
    # fork point F the checkpoints an injection at F forks from and `remediate` starts from (docs/reliability.md)
    ckpt_keep_last: int = 2
    ckpt_keep_steps: list[int] = field(default_factory=lambda: [LAB_K])
    telemetry: str = "full"  # full | basic (basic: no per-parameter stats, no spectral norms)
    spectral_every: int = 50  # largest singular value of each matrix every N steps (0 = never)
    natural_signals: bool = False  # attention logits and entropy, log Z of the output, on detail steps (full only)
    threads: int = 1  # torch CPU threads; fixed so results do not depend on the machine
    # native: the kernels this CPU offers (bytes equal per platform fingerprint); portable: ATen's scalar kernels,
    # MKL's CBWR=COMPATIBLE and oneDNN off, chosen before torch's first kernel (core/numerics.py, docs/metrics.md)
    numerics: str = "native"
    device: str = "cpu"  # cpu | cuda | auto (auto: cuda when PyTorch sees a GPU)
    precision: str = "fp32"  # fp32 | bf16 (bf16 autocast of the training forward; GPU only)
    preset: str = "course"  # where the defaults come from (PRESETS); explicit fields override it
    progress: bool = True
    log: str = "jsonl"  # metrics sinks besides metrics.jsonl: jsonl | tensorboard | mlflow, comma-separated (run/sinks.py)
    # injection (the lab's maybe_inject knob)
    injection: str = "none"
    injection_step: int = LAB_K
    injection_scale: float = 50.0
    injection_sentence: str = "She has written the letter."
    injection_param: str = "lm_head.bias"
    injection_factor: float = 100.0
    # the faults beyond the lab's three (core/injections.py, docs/diagnosis.md)
    injection_span: int = 20  # lr_spike / stuck_loader / target_leak: steps it lasts from K (0 = to the end)
    injection_mult: float = 10.0  # lr_spike: the LR multiplier
    injection_mode: str = "random"  # corrupt_batch: random | shift | mismatch
    injection_rows: int = 0  # corrupt_batch: rows corrupted (0 = every row)
    injection_beta2: float = 0.999  # adam_setting: AdamW's beta2 from K on
    injection_eps: float = 1e-8  # adam_setting: AdamW's eps from K on
    # blind mode (blind.py): the run's files withhold its injection / break settings until the reveal
    blind: bool = False
    # remedy (remedy.py): the fix a stability-check leaf prescribes, applied inside the training step
    remedy: str = "none"  # none | skip_batch | restore_moments | zclip
    remedy_step: int = -1  # skip_batch: the step not applied; restore_moments: the step it restores at
    remedy_param: str = ""  # restore_moments: the one tensor whose moments are restored ("" = every tensor)
    remedy_zclip_z: float = 2.5  # zclip: z-score of the pre-clip norm (vs its EMA) that counts as a spike
    remedy_zclip_alpha: float = 0.97  # zclip: EMA decay of the norm's mean and variance
    remedy_zclip_warmup: int = 25  # zclip: steps of statistics before it may act
    # counterfactual replays (lab/explain.py): at each of swap_steps the step trains on the batch the data order
    # serves at step + swap_offset instead (after any batch injection), a pure function of (seed, step)
    swap_steps: list[int] = field(default_factory=list)
    swap_offset: int = 0

    # ---- derived ----
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def hash(self, exclude: tuple[str, ...] = NON_NUMERIC_FIELDS) -> str:
        d = {k: v for k, v in self.to_dict().items()
             if k not in exclude and not (k in HASH_OMIT_AT_DEFAULT and v == _DEFAULTS[k])}
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]

    def trunk_hash(self) -> str:
        """Hash of everything but the injection: runs with equal trunk hashes agree before step K."""
        return self.hash(exclude=NON_NUMERIC_FIELDS + INJECTION_FIELDS)

    def replace(self, **changes: Any) -> "TrainConfig":
        return dataclasses.replace(self, **changes)


FIELD_TYPES = {f.name: f.type for f in fields(TrainConfig)}
_DEFAULTS = TrainConfig().to_dict()


# How big a config value may be before it is even looked at: YAML aliases make a 1 kB file a list of 10^9
# items (each alias is the same object, so it loads at once, and only formatting or walking it explodes).
MAX_VALUE_ITEMS = 10_000  # elements of a list field, nested ones included (no field needs a thousand)
MAX_VALUE_DEPTH = 1  # a list field holds scalars: a list inside it is already wrong
MAX_TEXT = 10_000  # characters of one text value
MAX_CONFIG_BYTES = 1_000_000  # a config file (a run's config.yaml is about 1 kB)


def _too_big(value: Any) -> str | None:
    """Why VALUE is too big or too deep to be a config value, walked without formatting it; None when it fits."""
    count, todo = 0, [(value, 0)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, str) and len(item) > MAX_TEXT:
            return f"a text of {len(item)} characters (at most {MAX_TEXT})"
        if isinstance(item, (list, tuple, dict)):
            if depth >= MAX_VALUE_DEPTH:
                return f"a value nested deeper than {MAX_VALUE_DEPTH} level (a list inside a list)"
            count += len(item)
            if count > MAX_VALUE_ITEMS:
                return f"a value of more than {MAX_VALUE_ITEMS} items"
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            todo += [(c, depth + 1) for c in children]
    return None


def _shown(value: Any) -> str:
    """VALUE for an error message, cut to one short line (called only on a value _too_big let through)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _coerce(name: str, value: Any) -> Any:
    """Convert a YAML or command-line value to the field's declared type, or raise a UserError. The value's
    size and depth are checked first, before anything formats or walks it."""
    typ = FIELD_TYPES[name]
    too_big = _too_big(value)
    if too_big:
        raise UserError(f"config field '{name}' expects {typ}, got {too_big}; fix the value and run again")
    if name == "grad_clip" and isinstance(value, str) and value.strip().lower() in ("none", "off", "null"):
        return 0.0  # clipping off
    if name == "grad_clip" and value is None:  # YAML `grad_clip: null` / `~`
        return 0.0
    try:
        if typ == "bool":
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on"):
                return True
            if isinstance(value, str) and value.lower() in ("false", "0", "no", "off"):
                return False
            raise ValueError
        if typ == "int":
            return _coerce_int(value)
        if typ == "float":
            if isinstance(value, bool):
                raise ValueError
            out = float(value)
            if not math.isfinite(out):
                raise ValueError
            return out
        if typ == "str":
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise ValueError
            return str(value)
        if typ == "list[int]":
            if isinstance(value, (int, str)) and not isinstance(value, bool):
                value = [v.strip() for v in str(value).split(",") if v.strip()]
            if not isinstance(value, list):
                raise ValueError
            return [_coerce_int(v) for v in value]
        if typ == "list[str]":
            if isinstance(value, str):
                value = [v.strip() for v in value.split(",") if v.strip()]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError
            return list(value)
    except (ValueError, TypeError):
        pass
    raise UserError(f"config field '{name}' expects {typ}, got {_shown(value)}; fix the value and run again")


def _coerce_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError
        return int(value)
    text = str(value).strip()
    if len(text) > 40:  # int() of a huge digit string is slow and no field needs one
        raise ValueError
    return int(text)


def unknown_key_error(key: str) -> UserError:
    close = difflib.get_close_matches(key, FIELD_TYPES, n=3) if len(key) <= 80 else []
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return UserError(
        f"unknown config key {_shown(key)}{hint}; 'minitrain config' lists every key"
    )


def build_config(base: dict[str, Any] | None = None, overrides: list[str] | None = None) -> TrainConfig:
    """Make a validated config from a dict (e.g. loaded YAML) and `key=value` override strings."""
    values: dict[str, Any] = {}
    for key, value in (base or {}).items():
        if key not in FIELD_TYPES:
            raise unknown_key_error(key)
        values[key] = _coerce(key, value)
    for item in overrides or []:
        if "=" not in item:
            raise UserError(f"--set expects key=value, got {item!r}; e.g. --set lr_max=0.001")
        key, value = item.split("=", 1)
        key = key.strip().replace("-", "_")
        if key not in FIELD_TYPES:
            raise unknown_key_error(key)
        values[key] = _coerce(key, _set_list(key, value) if FIELD_TYPES[key].startswith("list[") else value)
    preset = values.get("preset", "course")
    if preset not in PRESETS:
        raise UserError(f"unknown preset {preset!r}; valid presets: {', '.join(PRESETS)}")
    cfg = TrainConfig(**{**PRESETS[preset], **values})
    validate(cfg)
    return cfg


# libyaml's parser (PyYAML's wheels carry it): it refuses a document nested over 1000 deep at once, where the
# pure-Python parser takes seconds to reach a RecursionError; both build the same values with the safe loader.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _parse_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_LOADER)


def _set_list(key: str, text: str) -> Any:
    """The value of `--set KEY=[...]` (a list field) as YAML reads it; a UserError when it is no YAML value."""
    if len(text) > MAX_TEXT:
        raise UserError(f"--set {key}= is {len(text)} characters long (at most {MAX_TEXT}); give a shorter value")
    try:
        return _parse_yaml(text)
    except (yaml.YAMLError, RecursionError, ValueError):
        raise UserError(f"--set {key}={_shown(text)[1:-1]} is not a value YAML reads; write it as e.g. "
                        f"--set {key}=[300,1000]") from None


def load_yaml(path: Path) -> dict[str, Any]:
    try:
        path = Path(path)
        if path.exists() and not path.is_file() and not path.is_dir():  # a FIFO or a device would hang the read
            raise UserError(f"config file {path} is not a regular file; give a YAML file")
        if path.is_file() and path.stat().st_size > MAX_CONFIG_BYTES:
            raise UserError(f"config file {path} is {path.stat().st_size} bytes, more than a config holds "
                            f"({MAX_CONFIG_BYTES}); give the right file")
        data = _parse_yaml(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise UserError(f"config file {path} not found; check the path") from None
    except IsADirectoryError:
        raise UserError(f"config file {path} is a folder; give a YAML file (e.g. RUN/config.yaml)") from None
    except UnicodeDecodeError as e:
        raise UserError(f"config file {path} is not UTF-8 text (byte {e.start}); save it as UTF-8 and run again") from None
    except OSError as e:
        raise UserError(f"config file {path} cannot be read ({e.strerror}); check the path") from None
    except yaml.YAMLError as e:
        first = str(e).splitlines()[0] if str(e) else "parse error"
        raise UserError(f"config file {path} is not valid YAML ({first}); fix it and run again") from None
    except RecursionError:
        raise UserError(f"config file {path} nests too deeply for a config; fix it and run again") from None
    except ValueError as e:  # a number YAML cannot convert (an integer of thousands of digits)
        raise UserError(f"config file {path} holds a value YAML cannot read ({str(e)[:60]}); fix it and run "
                        "again") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"config file {path} must hold a mapping of key: value")
    for key in data:
        if not isinstance(key, str):
            raise UserError(f"config file {path} has a key {_shown(key)} that is not a field name; "
                            "see 'minitrain config' for the valid keys")
    return data


def validate(cfg: TrainConfig) -> None:
    def need(cond: bool, msg: str) -> None:
        if not cond:
            raise UserError(msg)

    for name in ("seed", "corpus_seed"):
        need(0 <= getattr(cfg, name) <= MAX_SEED, f"{name} must be an integer from 0 to {MAX_SEED}, got "
             f"{getattr(cfg, name)}")
    # resource bounds, checked before any work starts (the largest preset is well inside each)
    for name, low in (("steps", 1), ("batch_size", 1), ("threads", 1), ("n_layer", 1), ("d_model", 1), ("d_ff", 1),
                      ("n_head", 1), ("context", 8), ("vocab_size", 300), ("corpus_scale", 1), ("val_max_rows", 1)):
        value, high = getattr(cfg, name), LIMITS[name]
        need(low <= value <= high, f"{name} must be {'positive' if low == 1 else f'at least {low}'} and at most "
             f"{high}, got {value}")
    need(cfg.d_model % cfg.n_head == 0,
         f"d_model ({cfg.d_model}) must be a multiple of n_head ({cfg.n_head})")
    need((cfg.d_model // cfg.n_head) % 2 == 0, "d_model / n_head must be even for RoPE")
    need(cfg.lr_max >= 0 and cfg.lr_min >= 0, "lr_max and lr_min must be >= 0")
    need(cfg.lr_min <= cfg.lr_max, f"lr_min ({cfg.lr_min}) must not exceed lr_max ({cfg.lr_max})")
    need(cfg.warmup_steps >= 0, f"warmup_steps must be >= 0, got {cfg.warmup_steps}")
    need(0 <= cfg.beta1 < 1 and 0 <= cfg.beta2 < 1, "beta1 and beta2 must be in [0, 1)")
    need(cfg.eps > 0, "eps must be positive")
    need(cfg.weight_decay >= 0, "weight_decay must be >= 0")
    need(cfg.z_loss >= 0, f"z_loss must be >= 0 (0 = off; PaLM used 1e-4), got {cfg.z_loss}")
    need(not cfg.natural_signals or cfg.telemetry == "full",
         "natural_signals rides on full telemetry's detail steps; set telemetry=full or natural_signals=false")
    need(cfg.grad_clip >= 0, f"grad_clip must be >= 0 (0 or none = no clipping), got {cfg.grad_clip}")
    need(cfg.init_std > 0 and cfg.init_scale > 0, "init_std and init_scale must be positive")
    need(cfg.eval_every > 0, "eval_every must be positive")
    need(cfg.ckpt_every > 0, "ckpt_every must be positive")
    need(cfg.spectral_every >= 0, "spectral_every must be >= 0")
    need(cfg.telemetry in ("full", "basic"), f"telemetry must be 'full' or 'basic', got {cfg.telemetry!r}")
    need(cfg.ckpt_keep_last >= 0, f"ckpt_keep_last must be >= 0 (0 keeps every checkpoint), got {cfg.ckpt_keep_last}")
    need(all(s >= 0 for s in cfg.ckpt_keep_steps), f"ckpt_keep_steps must be steps >= 0, got {cfg.ckpt_keep_steps}")
    need(all(s >= 0 for s in cfg.swap_steps), f"swap_steps must be steps >= 0, got {cfg.swap_steps}")
    need(not cfg.swap_steps or cfg.swap_offset != 0,
         "swap_steps needs a non-zero swap_offset (the batch of step + swap_offset is served instead)")
    need(all(s + cfg.swap_offset >= 0 for s in cfg.swap_steps), "swap_offset takes a swapped step below step 0")
    need(cfg.device in ("cpu", "cuda", "auto"), f"device must be cpu, cuda or auto, got {cfg.device!r}")
    need(cfg.numerics in ("native", "portable"), f"numerics must be native or portable, got {cfg.numerics!r}")
    need(cfg.precision in ("fp32", "bf16"), f"precision must be fp32 or bf16, got {cfg.precision!r}")
    need(cfg.precision == "fp32" or cfg.device != "cpu",
         "precision=bf16 is a GPU option and device=cpu; use --device cuda (or auto), or precision=fp32")
    params = cfg.vocab_size * cfg.d_model + cfg.n_layer * (4 * cfg.d_model ** 2 + 2 * cfg.d_model * cfg.d_ff)
    need(params <= MAX_PARAMS, f"the model would have about {params / 1e6:.0f}M parameters, more than the "
         f"{MAX_PARAMS // 10**6}M minitrain allows; make n_layer, d_model, d_ff or vocab_size smaller")
    need(len(cfg.val_verbs) >= 1, "val_verbs must name at least one verb")
    # the injection itself is validated by minitrain.injections (it knows the registered names)
    from minitrain.core.injections import validate_injection_config

    validate_injection_config(cfg)
    from minitrain.core.remedy import validate_remedy_config

    validate_remedy_config(cfg)
    unknown = [n for n in cfg.log.split(",") if n.strip() and n.strip() not in LOG_SINKS]
    need(not unknown, f"log={cfg.log!r}: unknown sink {', '.join(unknown)}; choose from {', '.join(LOG_SINKS)} "
         "(comma-separated, e.g. --set log=tensorboard,mlflow)")
