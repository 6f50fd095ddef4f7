"""AgentEpisode: turns become actions, tool outputs enter masked, and the turn and context budgets end an
episode with an early-stop note and one final turn."""

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import mgrpo_actors.agents.episode as episode_module
import mgrpo_actors.agents.trajectory as trajectory_module
from mgrpo_actors.agents.episode import (
    BUDGET_NOTES,
    TRUNCATION_NOTE,
    ActionStop,
    AgentEpisode,
    Answer,
    ContextBudgetError,
    Malformed,
    ToolCall,
    action_stop,
    cut_after_action,
)
from mgrpo_actors.agents.prompts import opening_messages
from mgrpo_actors.agents.turn_format import format_answer, format_tool_call, parse_turn
from mgrpo_actors.config.agents import AgentConfig
from mgrpo_actors.engines import Generation
from mgrpo_actors.models.loader import load_tokenizer, resolve_model_dir
from mgrpo_actors.rollout.driver import run_episodes
from mgrpo_actors.rollout.scoring import format_check
from tests.agent_helpers import tiny_tokenizer
from tests.scripted_engine import ScriptedEngine, by_turn

OPENING = opening_messages("You are a research agent.", "Who founded Aldora?")
SEARCH = format_tool_call("search", {"query": "Aldora"}, think="look it up")


def turn(text: str, finish_reason: str = "stop", version: int = 0) -> Generation:
    tokenizer = tiny_tokenizer()
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if finish_reason == "stop":
        ids.append(tokenizer.eos_token_id)
    return Generation(ids, np.full(len(ids), -0.5, dtype=np.float32), finish_reason, version)


def episode(**cfg) -> AgentEpisode:
    return AgentEpisode(tiny_tokenizer(), OPENING, AgentConfig(**cfg), episode_id="r0", tool_names=("search",))


def test_an_answer_turn_ends_the_episode():
    ep = episode()
    action = ep.apply(turn(format_answer("Galen", think="I know it")))
    assert action == Answer("Galen")
    assert ep.done
    record = ep.record()
    assert (record.answer, record.stop_reason, record.turn_errors) == ("Galen", "answer", (None,))
    assert format_check(record, max_turns=20).ok


def test_a_tool_call_turn_asks_for_the_tool_with_a_call_id():
    ep = episode()
    assert ep.apply(turn(SEARCH)) == ToolCall(call_id="r0.t0", name="search", arguments={"query": "Aldora"})
    assert not ep.done
    ep.add_tool_result("1. Aldora ...")
    assert ep.apply(turn(SEARCH)).call_id == "r0.t1"


def test_a_malformed_turn_is_recorded_and_answered_with_the_parse_error():
    ep = episode()
    action = ep.apply(turn("Aldora was founded by Galen."))
    assert isinstance(action, Malformed)
    assert action.error.startswith("no <answer> or <tool_call>")
    assert action.feedback.startswith("Error: your last turn could not be read (no <answer> or <tool_call>")
    ep.add_tool_result(action.feedback, ok=False)
    ep.apply(turn(format_answer("Galen")))
    record = ep.record()
    assert record.turn_errors == (action.error, None)
    assert record.turns[0].tool_result == action.feedback and record.turns[0].tool_ok is False
    check = format_check(record, max_turns=20)
    assert not check.ok and check.reason.startswith("turn 0: no <answer>")


def test_a_turn_cut_by_the_token_budget_is_malformed():
    ep = episode()
    action = ep.apply(turn('<tool_call>{"name": "search", "arguments": {"query": "Ald', finish_reason="length"))
    assert isinstance(action, Malformed) and "unclosed" in action.error
    assert not ep.done


def test_text_is_decoded_from_the_sampled_ids_and_the_sampled_ids_are_the_masked_tokens():
    tokenizer = tiny_tokenizer()
    ep = episode(stop_after_action=False)
    prompt = ep.next_prompt_ids()
    first = turn(SEARCH)
    ep.apply(first)
    ep.add_tool_result("1. Aldora, founded by Galen")
    assert ep.next_prompt_ids()[: len(prompt) + len(first.token_ids)] == prompt + first.token_ids
    second = turn(format_answer("Galen"))
    ep.apply(second)
    record = ep.record()
    ids, mask = record.trajectory.token_ids, record.trajectory.loss_mask
    assert ids[mask == 1].tolist() == first.token_ids + second.token_ids
    assert record.turns[0].text == SEARCH  # eos is special: dropped from the text, kept in the ids
    tool_part = tokenizer.decode(ids[mask == 0][len(prompt) :].tolist())
    assert "1. Aldora, founded by Galen" in tool_part


def test_a_turn_ends_after_its_first_complete_action_as_if_stopped_there():
    tokenizer = tiny_tokenizer()
    sampled = turn(SEARCH + "\n<answer>Galen</answer> and more")
    kept, text = cut_after_action(sampled, tokenizer)
    assert tokenizer.decode(kept.token_ids) == text == SEARCH
    assert kept.token_ids == sampled.token_ids[: len(kept.token_ids)]
    np.testing.assert_array_equal(kept.logprobs, sampled.logprobs[: len(kept.token_ids)])
    assert (kept.finish_reason, kept.policy_version) == ("stop", sampled.policy_version)
    ep = episode()
    assert ep.apply(sampled) == ToolCall("r0.t0", "search", {"query": "Aldora"})
    assert ep.turns[0].num_tokens == len(kept.token_ids)


@pytest.mark.parametrize(
    "text",
    [
        format_tool_call("search", {"query": "what </tool_call> means"}),  # a tag inside a JSON string
        "<think>then </answer> closes it</think>" + format_answer("x"),  # a tag inside a thought
    ],
)
def test_a_closing_tag_that_does_not_end_a_valid_turn_does_not_cut_it(text):
    tokenizer = tiny_tokenizer()
    kept, parsed = cut_after_action(turn(text + " trailing"), tokenizer)
    assert tokenizer.decode(kept.token_ids) == parsed == text


def test_a_turn_without_a_valid_action_is_kept_whole():
    sampled = turn("no action </answer> here", finish_reason="length")
    assert cut_after_action(sampled, tiny_tokenizer()) == (sampled, "no action </answer> here")


@pytest.mark.parametrize("preset", ["tiny:main", "smollm2"])
@pytest.mark.parametrize(
    "block, tail, action",
    [
        ("<answer>Paris</answer>", ".", Answer("Paris")),  # SmolLM2: "</", "answer", ">."
        ("<answer>Paris</answer>", "</think> more", Answer("Paris")),  # SmolLM2: "></"
        (SEARCH, ",\nmore text", ToolCall("r0.t0", "search", {"query": "Aldora"})),  # SmolLM2: ">,"
    ],
)
def test_a_closing_tag_merged_with_the_next_characters_ends_the_turn_with_that_token_whole(preset, block, tail, action):
    tokenizer = load_tokenizer(resolve_model_dir(preset))
    ids = [*tokenizer(block + tail, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
    generation = Generation(ids, np.linspace(-1, -0.1, len(ids), dtype=np.float32), "stop", 2)
    kept, text = cut_after_action(generation, tokenizer)
    assert text == block
    kept_text = tokenizer.decode(kept.token_ids)
    assert kept_text.startswith(block) and not tokenizer.decode(kept.token_ids[:-1]).startswith(block)
    assert (kept_text != block) == (preset == "smollm2")  # SmolLM2 merges the tag's ">" with what follows
    assert kept.token_ids == ids[: len(kept.token_ids)] and kept.finish_reason == "stop"
    np.testing.assert_array_equal(kept.logprobs, generation.logprobs[: len(kept.token_ids)])
    ep = AgentEpisode(tokenizer, OPENING, AgentConfig(), episode_id="r0", tool_names=("search",))
    assert ep.apply(generation) == action
    assert ep.turns[0].text == block and ep.turns[0].num_tokens == len(kept.token_ids)


def test_cutting_decodes_each_token_once_and_parses_only_at_closing_tags(monkeypatch):
    tokenizer = tiny_tokenizer()

    class CountingTokenizer:
        """The tokenizer, counting how many ids go through decode."""

        decoded = 0

        def __getattr__(self, name):
            return getattr(tokenizer, name)

        def decode(self, ids, **kwargs):
            CountingTokenizer.decoded += len(ids)
            return tokenizer.decode(ids, **kwargs)

    parsed: list[str] = []
    monkeypatch.setattr(episode_module, "parse_turn", lambda text: parsed.append(text) or parse_turn(text))
    text = "<think>" + "x > y; " * 300 + "</think>" + format_answer("x") + " and </answer> more"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    generation = Generation(ids, np.zeros(len(ids), np.float32), "length", 0)
    _, turn_text = cut_after_action(generation, CountingTokenizer())
    assert turn_text == text[: text.index("</answer>") + len("</answer>")]
    assert CountingTokenizer.decoded <= len(ids)  # not a decode of every prefix (quadratic)
    assert len(parsed) == 1  # the first closing tag; nothing at the ">" of the thought


def test_closing_tags_that_are_single_ids_stop_the_engine():
    tokenizer = tiny_tokenizer()  # its format tags are single ids
    stops = tuple(sorted(tokenizer.convert_tokens_to_ids(["</tool_call>", "</answer>"])))
    engine = ScriptedEngine(tokenizer, by_turn(format_answer("Galen") + " and more"))
    ep = episode()
    run_episodes([ep], engine, execute_tools=lambda calls: [])
    ((_, params),) = engine.calls
    assert params.stop_token_ids == stops
    assert ep.record().trajectory.finish_reasons == ("stop",) and ep.record().answer == "Galen"
    sampled = ep.record().trajectory.token_ids[ep.record().trajectory.loss_mask == 1].tolist()
    assert sampled == tokenizer(format_answer("Galen"), add_special_tokens=False)["input_ids"]  # stopped at </answer>
    assert episode(stop_after_action=False).sampling_params(seed=None).stop_token_ids == ()
    smollm2 = load_tokenizer(resolve_model_dir("smollm2"))  # its tags are several ids: the episode cuts instead
    assert AgentEpisode(smollm2, OPENING, AgentConfig(), "r0", ("search",)).sampling_params(None).stop_token_ids == ()


def test_the_turn_budget_sends_an_early_stop_note_and_allows_one_final_turn():
    ep = episode(max_turns=3)
    ep.apply(turn(SEARCH))
    ep.add_tool_result("first result")
    ep.apply(turn(SEARCH))
    ep.add_tool_result("second result")
    assert not ep.done
    ep.apply(turn(SEARCH))  # the final turn calls a tool anyway: the episode ends without an answer
    assert ep.done
    record = ep.record()
    assert [t.tool_result for t in record.turns] == ["first result", f"second result\n\n{BUDGET_NOTES['turns']}", None]
    assert (record.answer, record.stop_reason, len(record.turns)) == (None, "turns", 3)
    assert format_check(record, max_turns=3) == (False, "ended without an <answer> turn")


def test_an_answer_in_the_final_turn_counts():
    ep = episode(max_turns=2)
    ep.apply(turn(SEARCH))
    ep.add_tool_result("result")
    ep.apply(turn(format_answer("Galen")))
    record = ep.record()
    assert (record.answer, record.stop_reason) == ("Galen", "answer")
    assert format_check(record, max_turns=2).ok


def test_with_one_turn_the_first_turn_is_final():
    ep = episode(max_turns=1)
    ep.apply(turn(SEARCH))
    assert ep.done and ep.record().stop_reason == "turns"


def test_the_context_budget_cuts_a_long_tool_output_and_makes_the_next_turn_final():
    probe = episode()
    prompt_len = len(probe.next_prompt_ids())
    ep = episode(max_new_tokens_per_turn=40, max_context_tokens=prompt_len + 260)
    first = turn(SEARCH)
    ep.apply(first)
    long_output = " ".join(f"Page {i}: Aldora was founded by Galen in the north." for i in range(80))
    ep.add_tool_result(long_output)
    assert not ep.done
    result = ep.turns[-1].tool_result
    assert result.endswith(f"{TRUNCATION_NOTE}\n\n{BUDGET_NOTES['context']}")
    assert long_output.startswith(result.split(TRUNCATION_NOTE)[0][:200])
    context = len(ep.next_prompt_ids())
    assert context + 40 <= prompt_len + 260  # the final turn still has its whole token budget
    assert ep.sampling_params(seed=None).max_new_tokens == 40
    ep.apply(turn(SEARCH))
    assert ep.done and ep.record().stop_reason == "context"
    assert len(ep.record().trajectory.token_ids) <= prompt_len + 260


WORDS = ("the", "city", "of", "Aldora", "was", "founded", "by", "Brevik", "in", "1900", "Ünïcödé", "東京", "\n\n")


@settings(max_examples=150)
@given(max_turns=st.integers(1, 8), max_new=st.integers(8, 64), max_context=st.integers(100, 700), data=st.data())
def test_every_turn_the_final_one_included_gets_its_whole_token_budget(max_turns, max_new, max_context, data):
    assume(max_context > max_new)
    tokenizer = tiny_tokenizer()
    cfg = AgentConfig(max_turns=max_turns, max_new_tokens_per_turn=max_new, max_context_tokens=max_context)
    opening = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    try:
        ep = AgentEpisode(tokenizer, opening, cfg, episode_id="r0", tool_names=("search",))
    except ContextBudgetError:
        assume(False)
    words = st.lists(st.sampled_from(WORDS), max_size=400).map(" ".join)
    while not ep.done:
        assert ep.sampling_params(seed=None).max_new_tokens == max_new
        call = format_tool_call("search", {"query": data.draw(words, label="query")[:300]})
        ids = [*tokenizer(call, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
        finish = "stop" if len(ids) <= max_new else "length"
        ep.apply(Generation(ids[:max_new], np.zeros(min(len(ids), max_new), np.float32), finish, 0))
        if not ep.done:
            ep.add_tool_result(data.draw(words, label="tool output"))
    record = ep.record()
    assert len(record.trajectory.token_ids) <= max_context and len(record.turns) <= max_turns


def test_a_short_tool_output_that_still_leaves_room_gets_no_note():
    probe = episode()
    prompt_len = len(probe.next_prompt_ids())
    ep = episode(max_new_tokens_per_turn=40, max_context_tokens=prompt_len + 400)
    ep.apply(turn(SEARCH))
    ep.add_tool_result("short")
    assert ep.turns[-1].tool_result == "short"


def test_an_opening_that_leaves_no_room_for_a_turn_is_refused():
    probe = episode()
    prompt_len = len(probe.next_prompt_ids())
    with pytest.raises(ContextBudgetError, match="opening prompt has"):
        episode(max_new_tokens_per_turn=64, max_context_tokens=prompt_len + 63)


def test_an_opening_with_room_for_only_one_turn_makes_it_final():
    probe = episode()
    prompt_len = len(probe.next_prompt_ids())
    ep = episode(max_new_tokens_per_turn=64, max_context_tokens=prompt_len + 100)
    ep.apply(turn(SEARCH))
    assert ep.done and ep.record().stop_reason == "context"


def test_a_done_episode_takes_no_more_turns_and_a_running_one_has_no_record():
    ep = episode()
    with pytest.raises(ValueError, match="still running"):
        ep.record()
    ep.apply(turn(format_answer("Galen")))
    with pytest.raises(ValueError, match="is done"):
        ep.apply(turn(SEARCH))
    with pytest.raises(ValueError, match="is done"):
        ep.add_tool_result("late")
    with pytest.raises(ValueError, match="is done"):
        ep.next_prompt_ids()


def test_the_trajectory_records_each_turns_policy_version():
    ep = episode()
    ep.apply(turn(SEARCH, version=3))
    ep.add_tool_result("r")
    ep.apply(turn(format_answer("Galen"), version=4))
    trajectory = ep.record().trajectory
    assert trajectory.turn_policy_versions == (3, 4) and trajectory.policy_version == 3


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(max_turns=0), "max_turns"),
        (dict(max_new_tokens_per_turn=0), "max_new_tokens_per_turn"),
        (dict(max_new_tokens_per_turn=100, max_context_tokens=100), "max_context_tokens"),
        (dict(temperature=-1.0), "temperature"),
        (dict(top_p=0.0), "top_p"),
    ],
)
def test_agent_config_is_validated(bad, message):
    with pytest.raises(ValueError, match=message):
        AgentConfig(**bad)


@pytest.mark.parametrize("preset", ["tiny:main", "smollm2"])
@pytest.mark.parametrize(
    "text",
    [
        SEARCH + "\n<answer>Galen</answer> and more",
        "<answer>Paris</answer>.",  # SmolLM2: the tag's ">" merged with "."
        "<think>then </answer> closes it</think>" + format_answer("x") + " trailing",  # a tag that ends no turn
        format_tool_call("search", {"query": "what </tool_call> means"}) + "\nmore",  # a tag inside a JSON string
        "no action </answer> here",
    ],
)
def test_the_engines_action_stop_ends_a_turn_at_the_very_id_where_the_episode_cuts_it(preset, text):
    """ActionStop (SamplingParams.stop_check) is True on a prefix of sampled ids exactly when it reaches the id
    cut_after_action keeps last, and that id is one of its candidates: stopping there samples what cutting keeps."""
    tokenizer = load_tokenizer(resolve_model_dir(preset))
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    kept, turn_text = cut_after_action(Generation(ids, np.zeros(len(ids), np.float32), "length", 0), tokenizer)
    ends_action = parse_turn(turn_text).is_valid
    stop = action_stop(tokenizer)
    again = action_stop(tokenizer)
    assert stop == again and hash(stop) == hash(again) and stop.candidates is again.candidates  # found once
    assert isinstance(stop, ActionStop)
    answers = [stop(ids[:k]) for k in range(1, len(ids) + 1)]
    first = answers.index(True) + 1 if True in answers else None
    assert first == (len(kept.token_ids) if ends_action else None)
    assert all(answers[first - 1 :]) if first else not any(answers)
    if first:
        assert ids[first - 1] in stop.candidates
    params = AgentEpisode(tokenizer, OPENING, AgentConfig(), "r0", ("search",)).sampling_params(None)
    assert params.stop_check == stop
    assert episode(stop_after_action=False).sampling_params(seed=None).stop_check is None


def test_the_action_stops_candidates_are_the_ids_whose_token_holds_a_closing_bracket():
    tokenizer = load_tokenizer(resolve_model_dir("smollm2"))
    candidates = action_stop(tokenizer).candidates
    pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    assert candidates == {i for i, piece in enumerate(pieces) if ">" in piece}
    assert len(candidates) < len(tokenizer) // 10  # the check is asked after few ids


def test_the_engine_asks_the_check_after_a_candidate_and_the_ids_that_may_complete_its_character():
    """A ">" sharing a token with a character's first bytes shows in the text only with the id that completes the
    character (DecodeStream holds an incomplete character back), so the engine asks again for RECHECK_IDS ids."""
    from mgrpo_actors.engines.base import RECHECK_IDS, asks_stop_check

    stop = ActionStop(tiny_tokenizer(), frozenset({7}))
    assert asks_stop_check(stop, 7, since_candidate=0) and not asks_stop_check(stop, 8, since_candidate=0)
    assert all(asks_stop_check(stop, 8, since) for since in range(1, RECHECK_IDS + 1))
    assert not asks_stop_check(stop, 8, since_candidate=RECHECK_IDS + 1)


def test_the_final_notes_room_is_found_once_per_tokenizer_and_is_the_longest_notes():
    ep = episode()
    builder = ep._builder
    longest = max(
        builder.tool_output_bound(episode_module._final_text("", note, cut=True))
        for note in episode_module.BUDGET_NOTES.values()
    )
    assert ep._final_note_tokens == longest
    texts = tuple(episode_module._final_text("", note, cut=True) for note in episode_module.BUDGET_NOTES.values())
    assert trajectory_module._LONGEST[tiny_tokenizer()][(builder.wrapping, texts)] == longest
    assert episode()._final_note_tokens == longest
