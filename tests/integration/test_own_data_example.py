"""deploy/configs/own-data.yaml as a user runs it (docs/own-models-and-data.md): two local HF model directories,
the questions JSONL under its own field names (pipeline.dataset_fields, and `mgrpo eval`'s --*-field flags), search
and visit over the user's documents (tools.pages), and an LLM judge: a real OpenAI-compatible chat-completions
server on loopback, started here, that answers each request with a score the judge parses.

The two model directories are tiny models (tiny:main's and tiny:sub's shapes and tokenizers, chat template
included) whose weights are set so that each always answers at once, `<answer>Aldora</answer>`: untrained tiny
models almost never write an answer, and only an answer reaches the judge. Their attention and MLP blocks are
zeroed, so the next token depends only on the last one (a bigram table in the embeddings and the untied head).
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from mgrpo_actors.config import NodeConfig, load_config
from mgrpo_actors.envs.dataset import load_pages, load_questions
from mgrpo_actors.envs.qa import QuestionFields
from mgrpo_actors.models.loader import load_tokenizer, resolve_model_dir
from mgrpo_actors.tools.setup import build_tool_registry
from tests.helpers import REPO, run_script

pytestmark = pytest.mark.integration

CONFIG = "deploy/configs/own-data.yaml"
DATA = REPO / "deploy" / "data" / "own-data"
FIELDS = QuestionFields(question="prompt", answer="target", id="qid", aliases="also_accept")
EVAL_FLAGS = ["--question-field", "prompt", "--answer-field", "target", "--id-field", "qid"]
ANSWER = "Aldora"  # one id of the tiny tokenizer
# Short budgets for CPU: M answers in its first turn anyway.
BUDGETS = [
    "--set",
    "agents.main.max_turns=2",
    "--set",
    "agents.sub.max_turns=2",
    "--set",
    "agents.main.max_new_tokens_per_turn=16",
    "--set",
    "agents.sub.max_new_tokens_per_turn=16",
    "--set",
    "agents.torch_threads=1",
]
LOOPBACK = {"no_proxy": "127.0.0.1,localhost", "NO_PROXY": "127.0.0.1,localhost"}  # urllib honours *_proxy


def answering_model(spec: str, out: Path) -> Path:
    """A local HF directory of `spec`'s shape and tokenizer whose model always writes `<answer>ANSWER</answer>`."""
    base = resolve_model_dir(spec)
    tokenizer = load_tokenizer(base)
    config = AutoConfig.from_pretrained(base, local_files_only=True)
    config.tie_word_embeddings = False  # the head is a table of its own
    model = AutoModelForCausalLM.from_config(config)
    (word,) = tokenizer(ANSWER, add_special_tokens=False)["input_ids"]
    answer_open, answer_close = tokenizer.convert_tokens_to_ids(["<answer>", "</answer>"])
    chain = [answer_open, word, answer_close, tokenizer.eos_token_id]
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()  # no attention, no MLP: the last hidden state is the last token's (normed) embedding
        for layer in model.model.layers:
            layer.input_layernorm.weight.fill_(1.0)
            layer.post_attention_layernorm.weight.fill_(1.0)
        model.model.norm.weight.fill_(1.0)
        embeddings, head = model.model.embed_tokens.weight, model.lm_head.weight
        embeddings[:, 0] = 1.0  # every token: after it comes <answer> ...
        head[answer_open, 0] = 10.0
        for dim, (token, following) in enumerate(zip(chain[:-1], chain[1:], strict=True), start=1):
            embeddings[token, dim] = 1.0  # ... except along the chain <answer> ANSWER </answer> <|im_end|>
            head[following, dim] = 100.0
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)  # tokenizer.json, tokenizer_config.json and chat_template.jinja
    return out


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """The user's two model directories, models/my-main and models/my-sub."""
    root = tmp_path_factory.mktemp("own") / "models"
    return {"main": answering_model("tiny:main", root / "my-main"), "sub": answering_model("tiny:sub", root / "my-sub")}


class _JudgeHandler(BaseHTTPRequestHandler):
    """POST …/chat/completions: "1" when the reference is in the response, else "0" (the judge's prompt layout,
    mgrpo_actors/algo/judge.py _user_prompt)."""

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][-1]["content"]
        question = prompt.split("Question or task:\n", 1)[1].split("\n\nReference:\n", 1)[0]
        reference = prompt.split("\n\nReference:\n", 1)[1].split("\n\nResponse:\n", 1)[0]
        response = prompt.split("\n\nResponse:\n", 1)[1]
        self.server.calls.append(
            {"path": self.path, "model": body["model"], "question": question, "reference": reference}
        )
        score = "1" if reference.lower() in response.lower() else "0"
        reply = json.dumps({"choices": [{"message": {"role": "assistant", "content": score}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


@pytest.fixture
def judge():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _JudgeHandler)
    server.daemon_threads = True
    server.calls = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def _yours(models: dict[str, Path], judge: ThreadingHTTPServer) -> list[str]:
    """The lines a user changes, as overrides: the model directories and the judge's URL."""
    return [
        "--set",
        f"agents.main.model={models['main']}",
        "--set",
        f"agents.sub.model={models['sub']}",
        "--set",
        f"agents.llm_judge.base_url=http://127.0.0.1:{judge.server_address[1]}/v1",
    ]


def _answers(path: Path) -> dict[str, list[str]]:
    return {q.question: q.answers for q in load_questions(path, FIELDS)}


def test_the_example_data_answers_its_questions_and_the_config_loads_as_shipped(monkeypatch):
    monkeypatch.chdir(REPO)  # the config's data paths are relative to the repository root, as for `mgrpo run`
    config = load_config(NodeConfig, CONFIG)
    assert config.pipeline.dataset_fields == FIELDS and config.agents.correct_judge == "llm"
    assert (config.agents.main.model, config.agents.sub.model) == ("models/my-main", "models/my-sub")
    assert Path(config.tools.pages) == DATA.relative_to(REPO) / "pages.jsonl"
    pages = load_pages(config.tools.pages)
    urls = {page.url for page in pages}
    assert all(link in urls for page in pages for link in page.links)  # every link leads to a page
    training, held_out = load_questions(DATA / "questions.jsonl", FIELDS), load_questions(DATA / "eval.jsonl", FIELDS)
    assert not {q.id for q in training} & {q.id for q in held_out} and len(training) >= 10
    # What the tool actors serve: search finds the documents, visit reads them (mgrpo_actors/tools/setup.py).
    tools = build_tool_registry(config.tools)
    found = tools.call("search", {"query": "Who designed the Lomvi soil probe?", "k": 3})
    assert found.ok and "synth://wiki/lomvi-probe" in found.content, found
    read = tools.call("visit", {"url": "synth://wiki/lomvi-probe", "goal": "the designer"})
    assert read.ok and "Petter Aune" in read.content, read
    for question in training + held_out:  # each answer is written on a page of the documents
        assert any(answer.lower() in page.text.lower() for answer in question.answers for page in pages), (
            question.question
        )


@pytest.mark.timeout(150)
def test_mgrpo_run_trains_one_step_on_your_models_data_documents_and_judge(models, judge, tmp_path):
    started = time.perf_counter()
    done = run_script(
        "mgrpo",
        "run",
        "--config",
        CONFIG,
        *_yours(models, judge),
        "--set",
        f"run.dir={tmp_path / 'runs'}",
        "--set",
        "pipeline.steps=1",
        "--set",
        "pipeline.rollouts_per_query=2",
        "--set",
        "learners.main.checkpoint_every=0",
        "--set",
        "learners.sub.checkpoint_every=0",
        *BUDGETS,
        timeout_s=140,
        env=LOOPBACK,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = " ".join(done.stdout.split())  # the console wraps long lines (the directories' paths)
    assert f"run 'own-data' (m-grpo): M {models['main']}, S {models['sub']}" in out
    assert "step 0: 2 queries × 2 rollouts" in out and "step 0 finished in" in out
    assert "main batch: 4 samples" in out and "run own-data finished after 1 steps" in out
    # The judge was asked about every rollout's answer, with the mapped question text and gold answers.
    answers = _answers(DATA / "questions.jsonl")
    assert len(judge.calls) >= 4, judge.calls
    assert {call["path"] for call in judge.calls} == {"/v1/chat/completions"}
    assert {call["model"] for call in judge.calls} == {"my-judge"}
    assert all(call["reference"] in answers[call["question"]] for call in judge.calls), judge.calls
    summary = json.loads((tmp_path / "runs" / "own-data" / "summary.json").read_text())
    assert [row["step"] for row in summary["steps"]] == [0]
    assert time.perf_counter() - started < 140


@pytest.mark.timeout(120)
def test_mgrpo_eval_scores_the_held_out_questions_through_the_judge(models, judge, tmp_path):
    out = tmp_path / "report.json"
    done = run_script(
        "mgrpo",
        "eval",
        "--config",
        CONFIG,
        *_yours(models, judge),
        "--file",
        str(DATA / "eval.jsonl"),
        *EVAL_FLAGS,
        "--aliases-field",
        "also_accept",
        "--runs",
        "1",
        "--limit",
        "2",
        "--out",
        str(out),
        *BUDGETS,
        timeout_s=110,
        env=LOOPBACK,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    setup = report["setup"]
    assert setup["dataset"]["fields"] == {
        "question": "prompt",
        "answer": "target",
        "id": "qid",
        "aliases": "also_accept",
    }
    assert setup["correct_judge"] == "llm" and setup["available"] == 4 and setup["runs"] == 1
    assert [(row["id"], row["answer"]) for row in report["questions"]] == [("hv-e1", "2011"), ("hv-e2", "salinity")]
    assert report["aggregate"]["format_valid"]["mean"] == 1.0  # both answered, in format
    assert report["aggregate"]["accuracy"]["mean"] == 0.0  # "Aldora" is neither answer: the judge said 0
    first_two = load_questions(DATA / "eval.jsonl", FIELDS)[:2]  # --limit 2
    assert {call["question"] for call in judge.calls} == {q.question for q in first_two}  # the mapped "prompt"s
    assert all(call["reference"] in _answers(DATA / "eval.jsonl")[call["question"]] for call in judge.calls)


@pytest.mark.timeout(90)
def test_a_model_directory_without_a_chat_template_stops_the_run_at_start_naming_it(models, judge, tmp_path):
    broken = tmp_path / "models" / "my-main"
    shutil.copytree(models["main"], broken)
    (broken / "chat_template.jinja").unlink()
    done = run_script(
        "mgrpo",
        "run",
        "--config",
        CONFIG,
        *_yours({**models, "main": broken}, judge),
        "--set",
        f"run.dir={tmp_path / 'runs'}",
        *BUDGETS,
        timeout_s=80,
        env=LOOPBACK,
    )
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert f"model directory '{broken}' has no chat template" in output
    assert "step 0:" not in output and not judge.calls  # before any rollout
