"""Continuous batching (engines/continuous.py): rows join a running batch and leave it one decode step at a time.
A row that joins samples the very tokens it samples alone with the same seed (fp32, both tiny families), its
behaviour logprobs equal a plain forward pass's, an episode's next turn starts from what its last turn left, rows of
other sampling settings wait for the batch to drain, and weights never change under a decoding row."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from mgrpo_actors.engines import SamplingParams, token_log_probs
from mgrpo_actors.engines import continuous as continuous_module
from mgrpo_actors.engines.base import EngineConfig
from mgrpo_actors.engines.hf import HFEngine
from mgrpo_actors.models.loader import load_model

ROWS = 12
STOP_IDS = tuple(range(0, 1024, 6))  # about one id in six stops a row: rows stop at many different steps


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module", params=["tiny:main", "tiny:sub"])
def model_and_tokenizer(request):
    return load_model(request.param)


def _prompts(tokenizer, rows: int = ROWS) -> list[list[int]]:
    texts = [f"<|im_start|>user\nquestion {i}: which city?<|im_end|>\n<|im_start|>assistant\n" for i in range(rows)]
    return [list(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in texts]


def _params(seed: int, **changes) -> SamplingParams:
    settings = dict(max_new_tokens=30, temperature=1.0, seed=seed, stop_token_ids=STOP_IDS) | changes
    return SamplingParams(**settings)


def _alone(model, tokenizer, prompt, params):
    return HFEngine(model, tokenizer).generate([prompt], params)[0]


def _drain(batch, tickets: dict[int, int], out: dict, submit_every: int = 0, pending=()) -> int:
    """Step until nothing runs or waits, submitting one of `pending` ((prompt, params, key)) every `submit_every`
    steps; returns the steps taken."""
    pending, steps = list(pending), 0
    while batch.busy or pending:
        if pending and (not batch.busy or (submit_every and steps % submit_every == 0)):
            prompt, params, key = pending.pop(0)
            tickets[batch.submit(prompt, params)] = key
        for ticket, generation in batch.step():
            out[tickets.pop(ticket)] = generation
        steps += 1
    return steps


def test_rows_joining_a_running_batch_sample_what_they_sample_alone(model_and_tokenizer):
    """4 rows start; 8 more join, one every 2 steps, while others run and leave: each row's tokens, finish reason
    and logprobs are those of generate([prompt]) alone with the same seed."""
    model, tokenizer = model_and_tokenizer
    prompts = _prompts(tokenizer)
    batch = HFEngine(model, tokenizer, EngineConfig(continuous_batching=True)).continuous_batch()
    tickets, out = {}, {}
    for i in range(4):
        tickets[batch.submit(prompts[i], _params(100 + i))] = i
    _drain(batch, tickets, out, submit_every=2, pending=[(prompts[i], _params(100 + i), i) for i in range(4, ROWS)])
    assert sorted(out) == list(range(ROWS)) and not tickets
    for i, prompt in enumerate(prompts):
        alone = _alone(model, tokenizer, prompt, _params(100 + i))
        assert out[i].token_ids == alone.token_ids and out[i].finish_reason == alone.finish_reason, i
        np.testing.assert_allclose(out[i].logprobs, alone.logprobs, atol=1e-4, rtol=0)
    assert len({len(g.token_ids) for g in out.values()}) > 3  # rows did leave at different steps


def test_a_joined_rows_behaviour_logprobs_equal_a_plain_forward_pass(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    prompts, params = _prompts(tokenizer, 6), _params(7, temperature=0.8, top_k=40, top_p=0.9)
    batch = HFEngine(model, tokenizer).continuous_batch()
    tickets, out = {batch.submit(prompts[0], params): 0}, {}
    _drain(batch, tickets, out, submit_every=1, pending=[(p, params, i) for i, p in enumerate(prompts) if i])
    for i, prompt in enumerate(prompts):
        generation = out[i]
        with torch.no_grad():
            logits = model(torch.tensor([prompt + generation.token_ids])).logits[0, len(prompt) - 1 : -1]
        recomputed = token_log_probs(logits, torch.tensor(generation.token_ids), params).numpy()
        np.testing.assert_allclose(generation.logprobs, recomputed, atol=1e-4, rtol=0)


def test_a_next_turn_starts_from_what_its_last_turn_left(model_and_tokenizer, monkeypatch):
    """Turn 2 of 6 episodes (turn 1's prompt, its generation and a tool message) feeds only the ids its finished row
    does not hold, and samples what a fresh engine samples from the whole prompt."""
    model, tokenizer = model_and_tokenizer
    fed: list[int] = []
    forward = continuous_module.forward_block

    def counting(model_, cache, block, valid):
        fed.append(int(valid.sum()))
        return forward(model_, cache, block, valid)

    monkeypatch.setattr(continuous_module, "forward_block", counting)
    prompts = _prompts(tokenizer, 6)
    batch = HFEngine(model, tokenizer).continuous_batch()
    tickets, first = {batch.submit(p, _params(i)): i for i, p in enumerate(prompts)}, {}
    _drain(batch, tickets, first)
    tool = list(tokenizer("<|im_start|>tool\nnothing found<|im_end|>\n<|im_start|>assistant\n")["input_ids"])
    second_prompts = [p + first[i].token_ids + tool for i, p in enumerate(prompts)]
    fed.clear()
    tickets, second = {batch.submit(p, _params(50 + i)): i for i, p in enumerate(second_prompts)}, {}
    _drain(batch, tickets, second)
    assert fed[0] == len(prompts) * (len(tool) + 1)  # per row: its last sampled id, then the tool message
    for i, prompt in enumerate(second_prompts):
        alone = _alone(model, tokenizer, prompt, _params(50 + i))
        assert second[i].token_ids == alone.token_ids, i
        np.testing.assert_allclose(second[i].logprobs, alone.logprobs, atol=1e-4, rtol=0)


def test_a_row_ends_at_its_own_budget():
    model, tokenizer = load_model("tiny:main")
    prompts = _prompts(tokenizer, 3)
    batch = HFEngine(model, tokenizer).continuous_batch()
    budgets = {0: 3, 1: 9, 2: 5}
    tickets = {batch.submit(prompts[i], _params(i, max_new_tokens=n, stop_token_ids=())): i for i, n in budgets.items()}
    out = {}
    _drain(batch, tickets, out)
    for i, n in budgets.items():
        assert len(out[i].token_ids) <= n
        assert out[i].finish_reason == ("length" if len(out[i].token_ids) == n else "stop")
        assert (
            out[i].token_ids
            == _alone(model, tokenizer, prompts[i], _params(i, max_new_tokens=n, stop_token_ids=())).token_ids
        )


def test_a_row_of_other_sampling_settings_waits_until_the_batch_drains_and_nothing_overtakes_it():
    """Rows join in order of arrival up to the first of other settings: that one runs once the batch has drained,
    and a later row of the running settings waits behind it (it would otherwise wait for as long as such rows come)."""
    model, tokenizer = load_model("tiny:main")
    prompts = _prompts(tokenizer, 3)
    batch = HFEngine(model, tokenizer).continuous_batch()
    tickets = {batch.submit(prompts[0], _params(0, max_new_tokens=12, stop_token_ids=())): "first"}
    batch.step()
    tickets[batch.submit(prompts[1], _params(1, temperature=0.5))] = "colder"
    tickets[batch.submit(prompts[2], _params(2, max_new_tokens=12, stop_token_ids=()))] = "same settings"
    order = []
    while batch.busy:
        for ticket, _ in batch.step():
            order.append(tickets[ticket])
        assert batch.running <= 1  # no two of them ever ran together
    assert order == ["first", "colder", "same settings"]


def test_held_rows_stay_within_their_byte_budget(monkeypatch):
    """Finished rows' keys and values are kept each in a cache of its own, oldest dropped first past HELD_BYTES."""
    model, tokenizer = load_model("tiny:main")
    prompts = _prompts(tokenizer, 8)
    batch = HFEngine(model, tokenizer).continuous_batch()
    tickets, out = {batch.submit(p, _params(i)): i for i, p in enumerate(prompts)}, {}
    _drain(batch, tickets, out)
    sizes = [held.bytes for held in batch._held]
    assert len(sizes) == 8 and all(held.cache.rows == 1 for held in batch._held)
    monkeypatch.setattr(continuous_module, "HELD_BYTES", sum(sizes[-3:]))
    tickets = {batch.submit(prompts[0] + [5, 7], _params(9, max_new_tokens=1)): 9}
    _drain(batch, tickets, out)
    assert sum(held.bytes for held in batch._held) <= sum(sizes[-3:]) and len(batch._held) <= 3


def test_weights_never_change_under_a_decoding_row():
    model, tokenizer = load_model("tiny:main")
    engine = HFEngine(model, tokenizer)
    batch = engine.continuous_batch()
    prompt = _prompts(tokenizer, 1)[0]
    batch.submit(prompt, _params(0, max_new_tokens=8, stop_token_ids=()))
    batch.step()
    engine.load_weights(model.state_dict(), version=1)
    with pytest.raises(RuntimeError, match="while 1 rows were decoding"):
        batch.step()


def test_new_weights_between_batches_drop_what_finished_rows_left():
    model, tokenizer = load_model("tiny:main")
    engine = HFEngine(model, tokenizer)
    batch = engine.continuous_batch()
    prompt = _prompts(tokenizer, 1)[0]
    tickets, out = {batch.submit(prompt, _params(0)): 0}, {}
    _drain(batch, tickets, out)
    assert batch._held and out[0].policy_version == 0
    engine.load_weights(model.state_dict(), version=4)
    tickets = {batch.submit(prompt + out[0].token_ids, _params(1)): 1}
    batch.step()
    assert not batch._held  # no key computed by version 0 was reused
    _drain(batch, tickets, out)
    assert out[1].policy_version == 4


class SecondCandidate:
    """A StopCheck: a row ends at the second of its sampled ids that is a candidate (ids divisible by 7)."""

    candidates = frozenset(range(0, 1024, 7))

    def __call__(self, ids):
        return sum(i in self.candidates for i in ids) >= 2

    def __hash__(self):
        return 7

    def __eq__(self, other):
        return isinstance(other, SecondCandidate)


@pytest.mark.parametrize("path", ["generate", "continuous"])
def test_a_stop_check_ends_each_row_where_it_first_holds_with_the_tokens_it_would_sample_anyway(
    model_and_tokenizer, path
):
    """With a stop check, each row is the prefix of its unchecked generation (same seed) up to the id where the check
    first holds, finish reason stop; rows it never holds for run as before. Turn by turn (narrowing as rows end) and
    continuously alike."""
    model, tokenizer = model_and_tokenizer
    prompts = _prompts(tokenizer, 16)
    free = _params(3, stop_token_ids=())
    checked = dataclasses.replace(free, stop_check=SecondCandidate())
    want = HFEngine(model, tokenizer).generate(prompts, free)
    if path == "generate":
        got = HFEngine(model, tokenizer).generate(prompts, checked)
    else:  # each row seeded as generate's row i: (seed, i), as alone with row_generators(1, ...) for row 0 only
        want = [_alone(model, tokenizer, p, dataclasses.replace(free, seed=100 + i)) for i, p in enumerate(prompts)]
        batch = HFEngine(model, tokenizer).continuous_batch()
        tickets, out = (
            {batch.submit(p, dataclasses.replace(checked, seed=100 + i)): i for i, p in enumerate(prompts)},
            {},
        )
        _drain(batch, tickets, out)
        got = [out[i] for i in range(len(prompts))]
    ended = 0
    for g, w in zip(got, want, strict=True):
        holds = [SecondCandidate()(w.token_ids[:k]) for k in range(1, len(w.token_ids) + 1)]
        end = holds.index(True) + 1 if True in holds else len(w.token_ids)
        assert g.token_ids == w.token_ids[:end]
        assert g.finish_reason == ("stop" if True in holds else w.finish_reason)
        np.testing.assert_allclose(g.logprobs, w.logprobs[:end], atol=1e-4, rtol=0)
        ended += True in holds and end < len(w.token_ids)
    assert ended >= 4  # the check did end rows early
