"""The reference's records (course.grading.reference): made in a kernel no student code runs in,
once per version of the source and per draw, a whole batch of draws in one kernel; a reference
that fails its own probes is refused."""

from __future__ import annotations

import nbformat
import pytest

from course.grading import hidden, judging, reference

BLOCK = """
@probe("double of a drawn vector", hints={"result": "multiply by two."})
def _(double):
    return {"result": double(torch.randn(3, generator=seeded(1)))}
"""


def _notebook(tmp_path, solution: str):
    setup = nbformat.v4.new_code_cell(
        "import torch\nfrom course.lesson.probes import probe, seeded"
    )
    answer = nbformat.v4.new_code_cell(solution)
    answer.metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": "double"}
    test = nbformat.v4.new_code_cell("### BEGIN HIDDEN TESTS" + BLOCK + "### END HIDDEN TESTS\n")
    test.metadata["nbgrader"] = {"grade": True, "grade_id": "test_double", "points": 1}
    path = tmp_path / "source" / "a" / "a.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[setup, answer, test]), path)
    return path


def test_hidden_blocks_split_from_the_visible_part():
    cell = "a = 1\n### BEGIN HIDDEN TESTS\nb = 2\n### END HIDDEN TESTS\nc = 3\n"
    assert hidden.split_hidden(cell) == ("a = 1\nc = 3\n", "b = 2\n")
    assert hidden.split_hidden("a = 1\n") == ("a = 1\n", "")


def test_the_reference_is_made_once_per_source_version_and_draw(tmp_path, monkeypatch):
    path = _notebook(tmp_path, "def double(x):\n    return x * 2")
    cache, runs = tmp_path / "cache", []
    real = reference._run
    monkeypatch.setattr(reference, "_run", lambda s, d, **k: runs.append(d) or real(s, d, **k))
    first = reference.records(path, cache, [21, 22])
    again = reference.records(path, cache, [22, 21, 23])
    assert runs == [[21, 22], [23]], "one kernel for both draws; the third made alone, later"
    assert first[21] == again[21] and set(again) == {21, 22, 23}
    assert first[21] != first[22], "another draw, other inputs"
    values = first[21]["test_double"][0]["record"]["dict"]["result"]["values"]
    assert judging.judge(first[21]["test_double"], again[21]["test_double"]) == judging.Verdict()
    path.write_text(path.read_text().replace("x * 2", "2 * x"))  # a new version: made anew
    assert (
        reference.records(path, cache, [21])[21]["test_double"][0]["record"]["dict"]["result"][
            "values"
        ]
        == values
    )
    assert runs[-1] == [21]


def test_a_reference_that_fails_its_own_probes_is_refused(tmp_path):
    path = _notebook(tmp_path, "def double(x):\n    raise ValueError('not yet')")
    with pytest.raises(reference.ReferenceError, match="test_double"):
        reference.records(path, tmp_path / "cache", [5])
    with pytest.raises(reference.ReferenceError, match="test_double"):
        reference.prefix(path, tmp_path / "cache")
