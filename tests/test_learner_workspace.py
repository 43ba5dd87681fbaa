"""The learner's folder (lab/learner/workspace.py): init, its templates, names that are refused."""
import pytest

from conftest import assert_one_line_error, run_cli
from minitrain.core.errors import UserError
from minitrain.lab import learner


def test_init_creates_the_folder_and_refuses_to_overwrite(tmp_path):
    proc = run_cli("learner", "init", "ana", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    d = tmp_path / "learners" / "ana" / "phase-19"
    assert (d / "spike-diagnoses.md").exists() and (d / "notes" / "lessons.md").exists()
    sections = learner.parse_diagnoses((d / "spike-diagnoses.md").read_text())
    assert [s.run for s in sections] == ["19-injection-A", "19-injection-B", "19-injection-C"]
    assert not any(s.filled() for s in sections)
    blind = learner.parse_diagnoses((d / "break-it-diagnoses.md").read_text())
    assert [s.run for s in blind] == ["19-break-it/01", "19-break-it/02", "19-break-it/03"]
    assert learner.new_lesson_lines((d / "notes" / "lessons.md").read_text()) == []  # the template counts nothing
    (d / "notes" / "lessons.md").write_text("mine\n")
    assert_one_line_error(run_cli("learner", "init", "ana", cwd=tmp_path), "already exists")
    assert (d / "notes" / "lessons.md").read_text() == "mine\n"  # nothing overwritten


@pytest.mark.parametrize("name", ["../evil", "a/b", "..", ".hidden", "a b", "", "x" * 41, "ana/../../etc", "ana\n"])
def test_bad_learner_names_are_refused(name):
    with pytest.raises(UserError, match="learner name"):
        learner.init_learner(name, "learners-never-made")


def test_a_bad_name_is_a_one_line_error_and_makes_nothing(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    assert_one_line_error(run_cli("learner", "init", "../evil", cwd=work), "learner name")
    assert not (work / "learners").exists() and not (tmp_path / "evil").exists()
