"""`mgrpo eval` as a real subprocess with the tiny models: a JSONL file with unknown fields and custom
field names, a split of the built-in web, a run's checkpoints, and the data errors (exit 2 naming the line)."""

from __future__ import annotations

import json

import pytest

from actors.cli import main
from mgrpo_actors.models.loader import load_model
from tests.helpers import run_script

pytestmark = pytest.mark.integration

TINY = [
    "--main",
    "tiny:main",
    "--sub",
    "tiny:sub",
    "--set",
    "tools.web_entities=120",
    "--max-turns",
    "2",
    "--max-new-tokens",
    "16",
]


def mgrpo_eval(*args: str, timeout_s: float = 90):
    return run_script("mgrpo", "eval", *args, timeout_s=timeout_s)


def write_jsonl(path, lines):
    path.write_bytes(
        b"\n".join(line if isinstance(line, bytes) else json.dumps(line).encode() for line in lines) + b"\n"
    )
    return path


def check_consistent(report: dict, runs: int, questions: int) -> None:
    """Shapes as asked, every metric in range, and the means agree with the per-question outcomes."""
    assert report["setup"]["runs"] == runs and report["setup"]["questions"] == questions and len(report["runs"]) == runs
    assert len(report["questions"]) == questions and all(len(row["correct"]) == runs for row in report["questions"])
    for r, run in enumerate(report["runs"]):
        assert 0.0 <= run["accuracy"] <= run["format_valid"] <= 1.0 and 0.0 <= run["reward"] <= 1.0
        assert run["accuracy"] == pytest.approx(sum(row["correct"][r] for row in report["questions"]) / questions)
        assert run["format_valid"] == pytest.approx(
            sum(row["format_valid"][r] for row in report["questions"]) / questions
        )
        assert run["turns"] == pytest.approx(sum(row["turns"][r] for row in report["questions"]) / questions)
        assert 1.0 <= run["turns"] <= 2.0  # --max-turns 2
    for name, spread in report["aggregate"].items():
        values = [run[name] for run in report["runs"]]
        assert spread["mean"] == pytest.approx(sum(values) / runs)
        assert spread["min"] == min(values) and spread["max"] == max(values) and spread["std"] >= 0.0


def test_a_jsonl_file_with_custom_and_unknown_fields(tmp_path):
    questions = write_jsonl(
        tmp_path / "gaia.jsonl",
        [
            {
                "task_id": "t1",
                "Question": "What is the founding year of Arvel Works?",
                "Final answer": 1963,
                "Level": 1,
                "file_name": "",
            },
            {
                "task_id": "t2",
                "Question": "Which city hosts Nolan Park?",
                "Final answer": "Brisk",
                "Annotator Metadata": {"Steps": "1. search"},
            },
            {"task_id": "t3", "Question": "Who leads Orrin Labs?", "Final answer": "Mara Quill", "tools": ["web"]},
            {"task_id": "t4", "Question": "Not evaluated: beyond --limit", "Final answer": "x"},
        ],
    )
    out = tmp_path / "report.json"
    done = mgrpo_eval(
        *TINY,
        "--file",
        str(questions),
        "--question-field",
        "Question",
        "--answer-field",
        "Final answer",
        "--id-field",
        "task_id",
        "--runs",
        "2",
        "--limit",
        "3",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(out.read_text())
    check_consistent(report, runs=2, questions=3)
    assert report["setup"]["mode"] == "main+sub" and report["setup"]["models"] == {
        "main": "tiny:main",
        "sub": "tiny:sub",
    }
    assert report["setup"]["available"] == 4 and report["setup"]["seeds"] == [0, 1]
    assert report["setup"]["dataset"]["fields"] == {
        "question": "Question",
        "answer": "Final answer",
        "id": "task_id",
        "aliases": "aliases",
    }
    assert [(row["id"], row["answer"]) for row in report["questions"]] == [
        ("t1", "1963"),
        ("t2", "Brisk"),
        ("t3", "Mara Quill"),
    ]
    assert "main+sub: main tiny:main, sub tiny:sub · 3 of 4 questions of" in done.stdout
    assert (
        "3 questions × 2 runs (seeds [0, 1])" in done.stdout
        and "sub calls / question" in done.stdout
        and "R_M" in done.stdout
    )
    assert "6/6" in done.stderr  # the progress bar: questions × runs
    # Beside the report, one line per question and run.
    lines = [json.loads(line) for line in (tmp_path / "report.questions.jsonl").read_text().splitlines()]
    assert [(line["id"], line["run"], line["seed"]) for line in lines] == [
        (qid, run, run) for qid in ("t1", "t2", "t3") for run in (0, 1)
    ]
    rows = {row["id"]: row for row in report["questions"]}
    for line in lines:
        row, run = rows[line["id"]], line["run"]
        assert line["gold"] == row["answer"] and line["answer"] == row["answers"][run]
        assert (line["correct"], line["sub_calls"], line["turns"]) == (
            row["correct"][run],
            row["sub_calls"][run],
            row["turns"][run],
        )


def test_compare_pairs_two_reports_question_by_question(tmp_path, capsys):
    def report(correct):
        return {
            "setup": {"dataset": {"split": "validation"}},
            "questions": [{"id": f"q{i}", "correct": c} for i, c in enumerate(correct)],
        }

    a, b, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "paired.json"
    a.write_text(json.dumps(report([[1, 1], [1, 0], [0, 0], [1, 1]])))
    b.write_text(json.dumps(report([[0], [1], [0], [0]])))
    assert main(["eval", "--compare", str(a), str(b), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    paired = json.loads(out.read_text())
    # d = [1, -0.5, 0, 1]: mean 0.375; of the 8 sign patterns of (1, -0.5, 1) those with |sum| >= 1.5: 4
    assert paired["questions"] == 4 and paired["difference"] == pytest.approx(0.375)
    assert paired["p_value"] == pytest.approx(0.5) and (paired["a_better"], paired["b_better"], paired["ties"]) == (
        2,
        1,
        1,
    )
    assert (
        "A - B = +0.375 (A 0.625, B 0.250), 95 % interval [" in printed
        and "p = 0.5000 (exact sign flip); A better on 2, B on 1, tied on 1 of 4 questions" in printed
    )
    assert main(["eval", "--compare", str(a), str(tmp_path / "missing.json")]) == 2
    assert "missing.json: no such report" in capsys.readouterr().err
    assert main(["eval", "--compare", str(a), str(b), "--main", "tiny:main"]) == 2
    assert "--compare reads two reports; --main" in capsys.readouterr().err


def test_a_split_of_the_built_in_web_with_the_single_agent(tmp_path):
    out = tmp_path / "report.json"
    done = mgrpo_eval(
        *TINY,
        "--split",
        "validation",
        "--limit",
        "2",
        "--single-agent",
        "--runs",
        "1",
        "--seed",
        "7",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(out.read_text())
    check_consistent(report, runs=1, questions=2)
    setup = report["setup"]
    assert setup["mode"] == "single-agent" and setup["models"] == {"main": "tiny:main"} and setup["seeds"] == [7]
    assert setup["dataset"] == {"split": "validation", "web_seed": 0, "web_entities": 120} and setup["available"] > 2
    assert report["aggregate"]["sub_calls"] == {"mean": 0.0, "std": 0.0, "min": 0.0, "max": 0.0}


def test_kinds_select_the_splits_questions_of_those_kinds(tmp_path):
    from mgrpo_actors.agents.setup import synthetic_web
    from mgrpo_actors.config import load_node_config

    out = tmp_path / "report.json"
    args = [*TINY, "--split", "validation", "--limit", "3", "--runs", "1", "--kinds", "compare,aggregate"]
    assert main(["eval", *args, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    web = synthetic_web(load_node_config(None, ["tools.web_entities=120"], "test").tools)
    kinds = {q.id: q.kind for q in web.splits["validation"]}
    wanted = [q.id for q in web.splits["validation"] if q.kind in ("compare", "aggregate")]
    assert report["setup"]["dataset"]["kinds"] == ["compare", "aggregate"]
    assert report["setup"]["available"] == len(wanted) < len(kinds)
    lines = [json.loads(line) for line in out.with_suffix(".questions.jsonl").read_text().splitlines()]
    assert [line["id"] for line in lines] == wanted[:3]  # the first 3 of those kinds, in split order


def test_a_runs_checkpoints_replace_the_models_and_a_frozen_agent_keeps_its_own(tmp_path):
    run_dir = tmp_path / "runs" / "r1"
    side = run_dir / "checkpoints" / "main"
    model, tokenizer = load_model("tiny:main")
    model.save_pretrained(side / "step3" / "hf")  # the layout a learner's Checkpoints.save leaves
    tokenizer.save_pretrained(side / "step3" / "hf")
    (side / "latest").write_text("step3")
    # S's model as config, not as --sub (which would win over the checkpoints and skip the sub side).
    args = [
        "--set",
        "agents.sub.model=tiny:sub",
        *TINY[4:],
        "--split",
        "validation",
        "--limit",
        "1",
        "--runs",
        "1",
        "--checkpoints",
        str(run_dir),
    ]
    missing = mgrpo_eval(*args)
    assert missing.returncode == 2
    assert (
        f"mgrpo eval: error: {run_dir / 'checkpoints' / 'sub'} holds no checkpoint of the sub agent" in missing.stderr
    )
    out = tmp_path / "report.json"
    done = mgrpo_eval(*args, "--set", "learners.sub.frozen=true", "--out", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "sub: no checkpoint in" in done.stdout and "keeps agents.sub.model tiny:sub" in done.stdout
    setup = json.loads(out.read_text())["setup"]
    assert setup["models"]["main"] == str(side / "step3" / "hf") and setup["checkpoints"] == {
        "main": "step3",
        "sub": None,
    }


# The data and usage errors come before any model loads: run in this process (as `mgrpo` would), which
# saves a subprocess's torch import per case.
@pytest.mark.parametrize(
    "lines, message",
    [
        (
            [{"question": "a?", "answer": "b", "x": 1}, b"", {"question": "c?", "answer": ""}],
            ":3: field 'answer' is empty",
        ),
        (
            [{"question": "a?", "answer": "b"}, '{"question": "Caf\u00e9?", "answer": "d"}'.encode("latin-1")],
            ":2: not UTF-8 (byte 0xe9",
        ),
        ([b'{"question": "a?",'], ":1: not valid JSON"),
    ],
)
def test_a_bad_line_exits_2_naming_it(tmp_path, capsys, lines, message):
    path = write_jsonl(tmp_path / "bad.jsonl", lines)
    assert main(["eval", *TINY, "--file", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"mgrpo eval: error: {path}{message}") and err.count("\n") == 1  # one line


@pytest.mark.parametrize(
    "args, message",
    [
        (["--answer-field", "Final answer"], "--answer-field name fields of a --file"),
        (["--runs", "0"], "need --runs >= 1, got 0"),
        (["--limit", "0"], "need --limit >= 1, got 0"),
        (["--batch", "0"], "need --batch >= 1, got 0"),
        (["--set", "tools.nope=1"], "tools.nope"),
        (["--out", "/no/such/dir/report.json"], "no directory '/no/such/dir' to write the report into"),
        (["--kinds", "lookup,riddle"], "pipeline.kinds must name some of lookup, chain"),
        (["--kinds", "lookup", "--file", "q.jsonl"], "--kinds selects the built-in web's questions by kind"),
    ],
)
def test_usage_errors_exit_2_with_a_message(capsys, args, message):
    assert main(["eval", *TINY, "--limit", "1", "--runs", "1", *args]) == 2  # a later flag wins: only `args` is wrong
    assert "mgrpo eval: error: " in (err := capsys.readouterr().err) and message in err


def test_the_subprocess_exits_2_on_a_bad_line_too(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [{"question": "a?", "answer": "b"}, {"question": "c?", "answer": ""}])
    done = mgrpo_eval(*TINY, "--file", str(path))
    assert done.returncode == 2 and done.stderr == f"mgrpo eval: error: {path}:2: field 'answer' is empty\n"
