"""core/numerics.py: every run records the platform its bytes come from; a fork or resume across platforms says
so; the portable mode gives one set of bytes whatever kernels the machine offers."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, SMALL_K, run_cli, small_args
from minitrain.core import numerics

ELSEWHERE = "AVX512_ELSEWHERE"  # a kernel set no machine reports: a donor made "on another machine"


def recorded(run: Path) -> dict:
    return json.loads((Path(run) / "manifest.json").read_text())


def as_if_made_elsewhere(run: Path) -> None:
    manifest = recorded(run)
    manifest["numerics"]["cpu_capability"] = ELSEWHERE
    (run / "manifest.json").write_text(json.dumps(manifest))


def test_a_run_records_its_platform_fingerprint(small_baseline):
    fp = recorded(small_baseline)["numerics"]
    assert fp["cpu_capability"] in ("DEFAULT", "AVX2", "AVX512", "ZVECTOR", "VSX", "SVE256")
    assert fp["threads"] == 1  # the run's own thread count (config `threads`), not the process's default
    assert {"torch", "torch_build", "blas", "mkl_cbwr", "onednn"} <= set(fp)
    assert numerics.key(fp) != "unknown" and fp["cpu_capability"] in numerics.key(fp)


def test_keys_name_one_platform_and_an_old_record_is_unknown():
    fp = {"torch": "2.13.0+cpu", "torch_build": "abc", "cpu_capability": "AVX2", "blas": "mkl-2024.2",
          "mkl_cbwr": "off", "onednn": "3.12.0", "threads": 1}
    assert numerics.key(fp) == "2.13.0+cpu AVX2 mkl-2024.2 cbwr=off onednn-3.12.0 1t"
    assert numerics.same(fp, dict(fp, env={"X": "1"}))  # what it was asked with is not what it ran on
    assert not numerics.same(fp, dict(fp, cpu_capability="AVX512"))
    assert not numerics.same(fp, dict(fp, torch_build="def"))
    assert numerics.key(None) == numerics.key({"torch": "2.13.0"}) == "unknown"
    assert not numerics.same(None, None)  # two runs made before fingerprints are not known to agree


def test_a_fork_from_a_donor_made_on_another_platform_says_so_in_one_line(small_baseline, tmp_path):
    exp = tmp_path / "experiments"
    shutil.copytree(small_baseline, exp / "18-baseline")
    same = run_cli("train", "--out", str(exp / "19-here"), "--injection", "scale", "--injection-step", str(SMALL_K),
                   *small_args(), check=True)
    assert "ran on" not in same.stderr and "numerics_mixed" not in recorded(exp / "19-here")
    as_if_made_elsewhere(exp / "18-baseline")
    res = run_cli("train", "--out", str(exp / "19-there"), "--injection", "scale", "--injection-step", str(SMALL_K),
                  *small_args(), check=True)
    lines = [line for line in res.stderr.splitlines() if "ran on" in line]
    assert len(lines) == 1 and "the donor 18-baseline" in lines[0] and ELSEWHERE in lines[0]
    (mixed,) = recorded(exp / "19-there")["numerics_mixed"]
    assert mixed["source"] == "the donor 18-baseline" and mixed["numerics"]["cpu_capability"] == ELSEWHERE
    # the fork's own bytes are those of this platform's fork: the donor's rows and checkpoint are unchanged
    assert (exp / "19-there" / "metrics.jsonl").read_bytes() == (exp / "19-here" / "metrics.jsonl").read_bytes()


def test_a_resume_of_steps_made_on_another_platform_says_so_and_keeps_the_record(tmp_path):
    from minitrain import trainer
    from conftest import small_config

    out = tmp_path / "run"
    trainer.train(small_config(), out, stop_at=50)
    as_if_made_elsewhere(out)
    res = run_cli("train", "--resume", str(out), check=True)
    assert sum("ran on" in line for line in res.stderr.splitlines()) == 1
    manifest = recorded(out)
    assert manifest["numerics_mixed"][0]["source"] == "the steps before this resume"
    assert manifest["numerics"]["cpu_capability"] != ELSEWHERE  # the environment is this process's again


def test_the_runs_table_shows_the_platform_only_where_runs_differ(small_lab, tmp_path):
    from minitrain.views import index

    exp = tmp_path / "experiments"
    for name in ("18-baseline", "19-injection-A"):
        shutil.copytree(small_lab / name, exp / name)
    assert 'data-col="numerics"' not in index.write_index(exp).read_text()
    as_if_made_elsewhere(exp / "19-injection-A")
    page = index.write_index(exp).read_text()
    assert page.count('<th data-col="numerics"') == 1 and ELSEWHERE in page


PORTABLE_RUN = """
import sys
from minitrain.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_portable_numerics_give_one_set_of_bytes_whatever_kernels_the_machine_offers(tmp_path):
    """Each process is started as a machine with other kernels would start it (ATen's kernel set, MKL's
    instruction set, oneDNN's ISA cap: every setting this machine can emulate): with numerics=portable the
    bytes are the same, and the manifest says what was fixed."""
    machines = {"scalar": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
                           "ONEDNN_MAX_CPU_ISA": "SSE41"},
                "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
                "native": {}}
    shas = {}
    for name, env in machines.items():
        out = tmp_path / name
        clean = {k: v for k, v in os.environ.items() if k not in numerics.KERNEL_ENV}
        proc = subprocess.run([sys.executable, "-c", PORTABLE_RUN, "train", "--out", str(out),
                               *small_args("steps=40", "numerics=portable")],
                              env={**clean, **env, "PYTHONPATH": str(ROOT / "src")}, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        shas[name] = (out / "metrics.jsonl").read_bytes()
        fp = recorded(out)["numerics"]
        assert (fp["cpu_capability"], fp["mkl_cbwr"], fp["onednn"], fp["threads"]) == ("DEFAULT", "COMPATIBLE", "off", 1)
    assert shas["scalar"] == shas["avx2"] == shas["native"]


def test_portable_numerics_in_a_process_that_already_chose_its_kernels_is_one_line(tmp_path):
    fp = numerics.fingerprint()  # this test process's kernels, chosen by the runs before this test
    res = run_cli("train", "--out", str(tmp_path / "run"), *small_args("steps=10", "numerics=portable"))
    if (fp["cpu_capability"], fp["mkl_cbwr"]) != ("DEFAULT", "COMPATIBLE"):
        assert res.returncode == 2 and "run it as a command of its own" in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()
    else:  # a suite started with the portable settings already in force
        assert res.returncode == 0, res.stderr
