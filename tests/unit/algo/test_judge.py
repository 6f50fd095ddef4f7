"""The OpenAI-compatible judge against a real local HTTP server: good, malformed, slow, failing replies."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from structlog.testing import capture_logs

from mgrpo_actors.algo.config import JudgeConfig
from mgrpo_actors.algo.judge import Judge, JudgeError, OpenAICompatibleJudge, parse_score_reply


def _chat_reply(content):
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()


# Behaviour per base-URL prefix: (HTTP status, body, delay in seconds).
ROUTES = {
    "/good": (200, _chat_reply("0.75"), 0.0),
    "/score-prefix": (200, _chat_reply("Score: 1"), 0.0),
    "/not-a-number": (200, _chat_reply("The answer looks right."), 0.0),
    "/out-of-range": (200, _chat_reply("7"), 0.0),
    "/not-json": (200, b"<html>oops</html>", 0.0),
    "/no-choices": (200, json.dumps({"error": "overloaded"}).encode(), 0.0),
    "/server-error": (500, b"{}", 0.0),
    "/slow": (200, _chat_reply("1"), 1.0),
}


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's naming)
        length = int(self.headers["Content-Length"])
        self.server.requests.append((self.path, dict(self.headers), json.loads(self.rfile.read(length))))
        status, body, delay = ROUTES[self.path.removesuffix("/chat/completions")]
        time.sleep(delay)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the slow route's client has already given up

    def log_message(self, *args):
        pass


@pytest.fixture(autouse=True)
def _no_proxy_for_loopback(monkeypatch):
    # urllib honours *_proxy variables; the local test server must be reached directly.
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    httpd.requests = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


def _judge(server, route, **overrides):
    base_url = f"http://127.0.0.1:{server.server_address[1]}{route}"
    settings = {"timeout_s": 2.0, **overrides}
    return OpenAICompatibleJudge(JudgeConfig(base_url=base_url, model="judge-model", **settings))


def test_good_reply_is_scored_and_request_is_well_formed(server, monkeypatch):
    monkeypatch.setenv("MGRPO_TEST_JUDGE_KEY", "secret-value")
    judge = _judge(server, "/good", api_key_env="MGRPO_TEST_JUDGE_KEY")
    assert isinstance(judge, Judge)
    verdict = judge.score("Where was he born?", "Castor Bay", "Castor Bay")
    assert verdict.score == 0.75 and not verdict.used_fallback and verdict.error is None
    path, headers, body = server.requests[-1]
    assert path == "/good/chat/completions"
    assert headers["Authorization"] == "Bearer secret-value"
    assert body["model"] == "judge-model" and body["temperature"] == 0.0
    assert "Where was he born?" in body["messages"][1]["content"]


def test_score_prefix_is_accepted(server):
    assert _judge(server, "/score-prefix").score("q", "r", "ref").score == 1.0


@pytest.mark.parametrize(
    ("route", "message"),
    [
        ("/not-a-number", "not a single number"),
        ("/out-of-range", "not a single number"),
        ("/not-json", "invalid JSON"),
        ("/no-choices", "lacks choices"),
        ("/server-error", "HTTP 500"),
    ],
)
def test_bad_replies_raise_judge_error(server, route, message):
    with pytest.raises(JudgeError, match=message):
        _judge(server, route).score("q", "r", "ref")


def test_slow_reply_times_out_with_judge_error(server):
    judge = _judge(server, "/slow", timeout_s=0.2)
    start = time.perf_counter()
    with pytest.raises(JudgeError, match="timed out"):
        judge.score("q", "r", "ref")
    assert time.perf_counter() - start < 0.9


def test_unreachable_judge_raises():
    with pytest.raises(JudgeError, match="failed or timed out"):
        judge = OpenAICompatibleJudge(JudgeConfig(base_url="http://127.0.0.1:9/v1", model="m", timeout_s=1.0))
        judge.score("q", "r", "s")


def test_missing_api_key_variable_raises(server, monkeypatch):
    monkeypatch.delenv("MGRPO_TEST_JUDGE_KEY", raising=False)
    with pytest.raises(JudgeError, match="MGRPO_TEST_JUDGE_KEY"):
        _judge(server, "/good", api_key_env="MGRPO_TEST_JUDGE_KEY").score("q", "r", "ref")


def test_configured_fallback_is_explicit_and_logged(server):
    judge = _judge(server, "/slow", timeout_s=0.2, fallback_score=0.5)
    with capture_logs() as logs:
        verdict = judge.score("q", "r", "ref")
    assert verdict.score == 0.5 and verdict.used_fallback and "timed out" in verdict.error
    assert [entry["event"] for entry in logs] == ["judge_fallback"]
    assert logs[0]["fallback_score"] == 0.5


@pytest.mark.parametrize(
    ("text", "score"), [("0", 0.0), ("1", 1.0), (" 0.25\n", 0.25), (".5", 0.5), ("SCORE = 0.9", 0.9)]
)
def test_parse_score_reply(text, score):
    assert parse_score_reply(text) == score


@pytest.mark.parametrize("text", ["", "yes", "1.5", "-0.1", "0.5 because", "2"])
def test_parse_score_reply_rejects(text):
    with pytest.raises(JudgeError):
        parse_score_reply(text)
