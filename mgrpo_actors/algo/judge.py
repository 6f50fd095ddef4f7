"""Pluggable judges for r_correct and r_expert, docs/method.md §Rewards.

A judge scores a response against a reference in [0, 1]. Rule judges (scorers.py) never fail; the LLM
judge here can, and then it raises JudgeError, unless a fallback score is configured explicitly, in
which case it logs the failure and marks the verdict `used_fallback`. It never turns a failure into a
silent 0.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import structlog

from mgrpo_actors.algo.config import JudgeConfig

log = structlog.get_logger(__name__)


class JudgeError(RuntimeError):
    """A judge could not produce a score (unreachable, timed out, HTTP error, unparseable reply)."""


@dataclass(frozen=True)
class Verdict:
    """A judge's score in [0, 1] and where it came from."""

    score: float
    # Name of the judge that produced it, for logs and metrics.
    judge: str
    # True when the judge failed and the configured fallback score was used instead.
    used_fallback: bool = False
    # Why the fallback was used (the error), None otherwise.
    error: str | None = None


@runtime_checkable
class Judge(Protocol):
    """Anything that scores `response` to `question` against `reference` in [0, 1].

    Used for M's r_correct (question = the user's question, reference = gold answer) and for S's
    r_expert (question = the subtask M sent, its task and context as `scorers.subtask_text` joins them;
    reference = the evidence entity or gold answer).
    """

    name: str

    def score(self, question: str, response: str, reference: str) -> Verdict: ...


JUDGE_SYSTEM_PROMPT = (
    "You grade answers. Compare the response with the reference for the given question or task. "
    "Reply with one number between 0 and 1 and nothing else: 1 if the response is correct and "
    "complete with respect to the reference, 0 if it is wrong, a value in between if partly right."
)

# The reply is one number, optionally after "score:"; anything else is a malformed reply.
_SCORE_REPLY = re.compile(r"^\s*(?:score\s*[:=]\s*)?([01](?:\.\d+)?|\.\d+)\s*$", re.IGNORECASE)


def _user_prompt(question: str, response: str, reference: str) -> str:
    return f"Question or task:\n{question}\n\nReference:\n{reference}\n\nResponse:\n{response}"


def parse_score_reply(text: str) -> float:
    """The number in a judge's reply; JudgeError when the reply is not one number in [0, 1]."""
    match = _SCORE_REPLY.match(text)
    if match is None:
        raise JudgeError(f"judge reply is not a single number in [0, 1]: {text[:200]!r}")
    value = float(match.group(1))
    if not 0.0 <= value <= 1.0:
        raise JudgeError(f"judge score {value} is outside [0, 1]")
    return value


class OpenAICompatibleJudge:
    """An LLM judge over HTTP: POST {base_url}/chat/completions, stdlib only.

    Thread-safe (holds no mutable state), so a pool of threads may share one instance.
    """

    def __init__(self, cfg: JudgeConfig, name: str = "openai-judge") -> None:
        self.cfg = cfg
        self.name = name
        self.url = cfg.base_url.rstrip("/") + "/chat/completions"

    def score(self, question: str, response: str, reference: str) -> Verdict:
        try:
            return Verdict(score=self._ask(question, response, reference), judge=self.name)
        except JudgeError as error:
            if self.cfg.fallback_score is None:
                raise
            log.warning(
                "judge_fallback",
                judge=self.name,
                url=self.url,
                error=str(error),
                fallback_score=self.cfg.fallback_score,
            )
            return Verdict(score=self.cfg.fallback_score, judge=self.name, used_fallback=True, error=str(error))

    def _ask(self, question: str, response: str, reference: str) -> float:
        body = {
            "model": self.cfg.model,
            "temperature": 0.0,
            "max_tokens": self.cfg.max_tokens,
            "messages": [
                {"role": "system", "content": JUDGE_SYSTEM_PROMPT},
                {"role": "user", "content": _user_prompt(question, response, reference)},
            ],
        }
        reply = self._post(body)
        try:
            content = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as error:
            raise JudgeError(
                f"judge response from {self.url} lacks choices[0].message.content: {str(reply)[:200]}"
            ) from error
        if not isinstance(content, str):
            raise JudgeError(f"judge response content from {self.url} is not text: {content!r}")
        return parse_score_reply(content)

    def _post(self, body: dict) -> dict:
        headers = {"Content-Type": "application/json"}
        if self.cfg.api_key_env is not None:
            key = os.environ.get(self.cfg.api_key_env)
            if not key:
                raise JudgeError(f"environment variable {self.cfg.api_key_env} (judge API key) is not set")
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.cfg.timeout_s) as http_response:
                raw = http_response.read()
        except urllib.error.HTTPError as error:
            raise JudgeError(f"judge at {self.url} answered HTTP {error.code}: {error.reason}") from error
        except (urllib.error.URLError, TimeoutError, OSError) as error:
            # urlopen reports a read timeout as TimeoutError and a connect timeout as URLError.
            raise JudgeError(f"judge at {self.url} failed or timed out after {self.cfg.timeout_s}s: {error}") from error
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise JudgeError(f"judge at {self.url} returned invalid JSON: {raw[:200]!r}") from error
