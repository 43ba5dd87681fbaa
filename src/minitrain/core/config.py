"""The run configuration: loaded from YAML (sectioned, flat or both), overridden with `--set key=value` (a flat
or a sectioned name), validated. The schema, in sections, is core/config_sections.py.

Every field has a course default (see ../shared/course-notes.md). Validation turns any bad value into a
`UserError` whose message says what is wrong and how to fix it.
"""
from __future__ import annotations

import difflib
import math
from pathlib import Path
from typing import Any

import yaml

from minitrain.core.config_sections import COURSE_DEFAULTS, DOTTED_TO_FLAT, FIELD_TYPES, FLAT_NAMES, SECTIONS, TrainConfig
from minitrain.core.errors import UserError
# imported from here by their callers
from minitrain.core.config_sections import HASH_OMIT_AT_DEFAULT, INJECTION_FIELDS, NON_NUMERIC_FIELDS  # noqa: F401
from minitrain.core.course import LAB_K  # noqa: F401

# Where a run's metrics rows go (the `log` field, run/sinks.py): metrics.jsonl always, the others on request.
LOG_SINKS = ("jsonl", "tensorboard", "mlflow")

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


# The course defaults by flat name (what hash version 1 compares HASH_OMIT_AT_DEFAULT's fields with).
_DEFAULTS = COURSE_DEFAULTS


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
    """The one-line error for KEY, naming the closest fields with their sections."""
    last = key.rsplit(".", 1)[-1]  # a field under the wrong section: that field first
    moved = [flat for flat, dotted in FLAT_NAMES.items() if "." in key and last in (flat, dotted.rsplit(".", 1)[-1])]
    close = difflib.get_close_matches(key, [*FLAT_NAMES, *DOTTED_TO_FLAT], n=6) if len(key) <= 80 else []
    names = list(dict.fromkeys([*moved, *(DOTTED_TO_FLAT.get(c, c) for c in close)]))[:3]
    shown = [name if FLAT_NAMES[name] == name else f"{name} ({FLAT_NAMES[name]})" for name in names]
    hint = f" (did you mean {', '.join(shown)}?)" if shown else ""
    return UserError(f"unknown config key {_shown(key)}{hint}; 'minitrain config' lists every key by section")


def flat_name(key: str) -> str:
    """The flat name of KEY, given flat (`lr_max`) or sectioned (`optim.lr_max`); a UserError when neither."""
    if key in FLAT_NAMES:
        return key
    if key in DOTTED_TO_FLAT:
        return DOTTED_TO_FLAT[key]
    raise unknown_key_error(key)


def _leaf_items(data: dict[str, Any], section: str = ""):
    """(key as written, value) of every field in DATA, the flat form, the sectioned form or both: a key naming a
    section (`optim`, `experiment.injection`) holds that section's fields."""
    for key, value in data.items():
        if not isinstance(key, str):
            raise UserError(f"config key {_shown(key)} in section {section or '(top)'} is not a field name; "
                            "see 'minitrain config' for the valid keys")
        dotted = f"{section}.{key}" if section else key
        if dotted in SECTIONS:
            if value is not None and not isinstance(value, dict):
                raise UserError(f"config section '{dotted}' holds fields, got {_shown(value)}; write it as "
                                f"{dotted.rsplit('.', 1)[-1]}: {{name: value}} ('minitrain config' lists them)")
            yield from _leaf_items(value or {}, dotted)
        else:
            yield dotted, value


def build_config(base: dict[str, Any] | None = None, overrides: list[str] | None = None) -> TrainConfig:
    """Make a validated config from a dict (e.g. loaded YAML: flat names, sections, or both) and `key=value`
    override strings (KEY a flat or a sectioned name)."""
    values: dict[str, Any] = {}
    written: dict[str, str] = {}
    for key, value in _leaf_items(base or {}):
        name = flat_name(key)
        if name in written:
            raise UserError(f"config key {name} is given twice (as {written[name]} and {key}); keep one")
        written[name] = key
        values[name] = _coerce(name, value)
    for item in overrides or []:
        if "=" not in item:
            raise UserError(f"--set expects key=value, got {item!r}; e.g. --set lr_max=0.001 or optim.lr_max=0.001")
        key, value = item.split("=", 1)
        name = flat_name(key.strip().replace("-", "_"))
        values[name] = _coerce(name, _set_list(key.strip(), value) if FIELD_TYPES[name].startswith("list[") else value)
    preset = values.get("preset", "course")
    if preset not in PRESETS:
        raise UserError(f"unknown preset {preset!r}; valid presets: {', '.join(PRESETS)}")
    cfg = TrainConfig(**{**PRESETS[preset], **values})
    validate(cfg)
    return cfg


def config_listing(cfg: TrainConfig) -> str:
    """What `minitrain config` prints: every field of CFG by section, as a flat YAML config (`--config` reads it
    back), each section a comment line and each field whose sectioned name is not SECTION.FLAT_NAME marked with it."""
    lines = ["# every field by section; --set takes the flat name (lr_max=0.001) or the sectioned one "
             "(optim.lr_max=0.001)"]
    section = ""
    for dotted, flat in DOTTED_TO_FLAT.items():
        here = dotted.rpartition(".")[0]
        if here != section:
            section = here
            lines.append(f"# {section}")
        text = yaml.safe_dump({flat: getattr(cfg, flat)}, default_flow_style=True, allow_unicode=True, width=10_000)
        lines.append(text.strip()[1:-1] + ("" if dotted in (flat, f"{section}.{flat}") else f"  # {dotted}"))
    return "\n".join(lines) + "\n"


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
