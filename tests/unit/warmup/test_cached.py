"""The warm start `mgrpo run` takes with `warmup.steps` > 0 (warmup/cached.py): built once into the cache on the
tiny models, reused by an unchanged config, rebuilt when what the weights depend on changes, and named as the
agents' models with the warm-up marked done."""

import dataclasses
import json

import numpy as np
import pytest
import torch

from mgrpo_actors.agents.setup import synthetic_web
from mgrpo_actors.config import NodeConfig, load_config
from mgrpo_actors.models.loader import load_model
from mgrpo_actors.warmup import cached
from mgrpo_actors.warmup.cached import resolve_warm_start, warm_start_dir
from mgrpo_actors.warmup.checkpoint import WarmupProgress

TINY = ["agents.main.model=tiny:main", "agents.sub.model=tiny:sub", "tools.web_entities=300"]


def _config(*overrides: str) -> NodeConfig:
    return load_config(NodeConfig, None, [*TINY, "warmup.steps=1", "warmup.questions=4", *overrides])


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(cached, "cache_root", lambda: tmp_path)  # the models stay where they are cached
    return tmp_path


def test_the_key_follows_what_the_weights_depend_on(cache):
    base = warm_start_dir(_config())
    assert base.parent == cache / "warmups" and base == warm_start_dir(_config())
    for changed in (
        "warmup.steps=2",
        "warmup.lr=0.001",
        "agents.sub.model=tiny:main",
        "tools.web_seed=3",
        "agents.main.max_turns=2",
        "run.method=main-only",
    ):
        assert warm_start_dir(_config(changed)) != base, changed
    # the oracle writes its turns: sampling, engines and the run's own shape do not change them
    for same in ("agents.main.temperature=0.9", "pipeline.steps=7", "learners.main.lr=0.1", "run.id=other"):
        assert warm_start_dir(_config(same)) == base, same


def test_built_once_then_reused_and_named_as_the_models(cache):
    config = _config()
    said: list[str] = []
    steps: list[tuple[str, int]] = []
    warmed, start = resolve_warm_start(config, said.append, lambda side, step, loss: steps.append((side, step)))
    assert start is not None and start.built and steps == [("main", 0), ("sub", 0)]
    assert said[0].startswith("warm-up (stage 0, supervised, before RL") and "built in" in said[-1]
    assert warmed.agents.main.model == start.models["main"] and warmed.agents.sub.model == start.models["sub"]
    assert warmed.warmup.steps == 0  # done: a child process reading this config does not warm up again
    assert resolve_warm_start(warmed, said.append) == (warmed, None)
    record = json.loads((warm_start_dir(config) / "warmup.json").read_text())
    assert record["settings"]["steps"] == 1 and len(record["agents"]["main"]["losses"]) == 1
    # the warmed weights differ from the start's: one supervised step was taken
    before, _ = load_model("tiny:main")
    after, _ = load_model(start.models["main"])
    assert any(not torch.equal(a, b) for a, b in zip(before.state_dict().values(), after.state_dict().values()))

    said.clear()
    again, reused = resolve_warm_start(config, said.append)
    assert reused is not None and not reused.built and reused.models == start.models
    assert len(said) == 1 and "reused from" in said[0] and again == warmed


def test_other_worlds_and_pages_join_the_warm_up(cache):
    """warmup.worlds 2: the oracle works the train questions of the run's web and of the next web seed's;
    warmup.pages: the other world's pages are samples too. Both change the key."""
    config = _config("warmup.worlds=2", "warmup.pages=0.5", "warmup.micro_batch=4")
    assert warm_start_dir(config) not in (warm_start_dir(_config()), warm_start_dir(_config("warmup.worlds=2")))
    _, start = resolve_warm_start(config, lambda line: None)
    record = start.record
    assert record["questions"] == 8  # 4 from each world
    assert record["agents"]["main"]["pages"] == 300  # the other world's: one page per entity
    assert record["agents"]["main"]["episodes"] == 8 and record["agents"]["sub"]["episodes"] >= 1  # beyond one world


def test_other_worlds_are_refused_with_your_own_pages(cache, tmp_path):
    from mgrpo_actors.warmup.web import warm_up_agents

    pages = tmp_path / "pages.jsonl"
    pages.write_text(json.dumps({"url": "doc://a", "title": "A", "text": "A is a page."}) + "\n")
    config = _config("warmup.worlds=2", f"tools.pages={pages}")
    with pytest.raises(ValueError, match="warmup.worlds 2 works the questions of other synthetic webs"):
        warm_up_agents(config, config.warmup, tmp_path / "out")


def test_all_tokens_learns_the_other_worlds_episodes_whole_and_the_runs_own_agent_tokens_only(cache, monkeypatch):
    """warmup.all_tokens with 2 worlds: the other world's episodes become TextSamples (every token learnt), the run's
    own keep their loss mask (no page of the run's web learnt), and the pages are the other world's only."""
    from mgrpo_actors.agents.trajectory import TokenTrajectory
    from mgrpo_actors.warmup import web
    from mgrpo_actors.warmup.supervised import TextSample

    seen: dict[str, tuple[list, list]] = {}

    def capture(model, trajectories, cfg, progress=None, compute_dtype="float32", texts=(), text_share=0.0, **_):
        seen[str(len(seen))] = (list(trajectories), list(texts))
        return WarmupProgress(cfg.steps, [1.0] * cfg.steps)

    monkeypatch.setattr(web, "warm_up_trajectories", capture)
    config = _config("warmup.worlds=2", "warmup.all_tokens=true", "warmup.pages=0.3")
    assert warm_start_dir(config) != warm_start_dir(_config("warmup.worlds=2", "warmup.pages=0.3"))
    resolve_warm_start(config, print)
    main_samples, main_pages = seen["0"]
    own = [s for s in main_samples if isinstance(s, TokenTrajectory)]
    other = [s for s in main_samples if isinstance(s, TextSample)]
    assert len(own) == 4 and len(other) == 4 and main_samples[:4] == own  # the run's web first, 4 questions each
    assert all(0 < int(t.loss_mask.sum()) < len(t.token_ids) for t in own)
    other_web = synthetic_web(dataclasses.replace(config.tools, web_seed=1))
    assert len(main_pages) == len(other_web.pages) == 300
    run_page = synthetic_web(config.tools).pages[0].text
    assert run_page not in {page.text for page in other_web.pages}


def test_final_turns_are_the_other_worlds_episodes_learnt_on_their_last_turn(cache, monkeypatch):
    """warmup.final_turns with 2 worlds: the loop gets the other world's episodes (never the run's own) with the loss
    mask on their last turn only, at the configured share."""
    from mgrpo_actors.warmup import web

    seen: list[tuple[list, list, float]] = []

    def capture(model, trajectories, cfg, progress=None, compute_dtype="float32", finals=(), final_share=0.0, **_):
        seen.append((list(trajectories), list(finals), final_share))
        return WarmupProgress(cfg.steps, [1.0] * cfg.steps)

    monkeypatch.setattr(web, "warm_up_trajectories", capture)
    config = _config("warmup.worlds=2", "warmup.final_turns=0.4")
    assert warm_start_dir(config) != warm_start_dir(_config("warmup.worlds=2"))
    assert "final_turns" not in cached._warmup_settings(_config("warmup.worlds=2"))  # old keys hold at the default
    assert cached._warmup_settings(config)["final_turns"] == 0.4
    resolve_warm_start(config, print)
    episodes, finals, share = seen[0]  # M's
    assert share == 0.4 and len(episodes) == 8 and len(finals) == 4  # 4 questions a world; the other world's only
    others = episodes[4:]  # the run's web first
    for final, whole in zip(finals, others, strict=True):
        np.testing.assert_array_equal(final.token_ids, whole.token_ids)
        start, end = whole.turn_spans[-1]
        assert final.loss_mask[start:end].tolist() == whole.loss_mask[start:end].tolist()
        assert final.loss_mask[:start].sum() == 0 and final.loss_mask[start:end].sum() > 0
    assert all(final.loss_mask.sum() < whole.loss_mask.sum() for final, whole in zip(finals, others, strict=True))
    assert len(seen[1][1]) > 0  # S's reports too


@pytest.mark.timeout(400)  # three warm-up builds (processes): slow on a busy 2-core machine
def test_an_interrupted_build_keeps_the_side_it_finished_and_resumes_the_other_to_the_same_weights(
    cache, tmp_path, monkeypatch
):
    """Interrupted in S's warm-up, the cache build goes on next time: M's finished warm-up is kept (not trained
    again), S resumes from its checkpoint, and both end bit for bit as an uninterrupted build's. How often it saves
    is not part of the key."""
    config = _config("warmup.steps=3", "warmup.checkpoint_seconds=1e-9")
    assert warm_start_dir(config) == warm_start_dir(_config("warmup.steps=3"))
    partial = warm_start_dir(config).parent / f".{warm_start_dir(config).name}.partial"

    def stop_in_sub(side: str, step: int, loss: float) -> None:
        if (side, step) == ("sub", 1):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        resolve_warm_start(config, print, stop_in_sub)
    assert (partial / ".main.json").is_file() and (partial / ".sub.checkpoint.pt").is_file()
    assert not warm_start_dir(config).exists()
    steps: list[tuple[str, int]] = []
    said: list[str] = []
    _, start = resolve_warm_start(config, said.append, lambda side, step, loss: steps.append((side, step)))
    assert steps == [("sub", 2)]  # M kept; S from its checkpoint after 2 steps
    assert said[0].endswith("(an interrupted build of it goes on where it was)")
    record = start.record
    assert record["agents"]["main"]["resumed_at"] == [] and record["agents"]["sub"]["resumed_at"] == [2]
    assert not partial.exists() and not list(warm_start_dir(config).glob(".*.checkpoint.pt"))

    monkeypatch.setattr(cached, "cache_root", lambda: tmp_path / "other")  # the same build, uninterrupted
    _, whole = resolve_warm_start(config, print)
    for side in ("main", "sub"):
        assert whole.record["agents"][side]["losses"] == record["agents"][side]["losses"], side
        resumed, _ = load_model(start.models[side])
        uninterrupted, _ = load_model(whole.models[side])
        for a, b in zip(resumed.state_dict().values(), uninterrupted.state_dict().values(), strict=True):
            assert torch.equal(a, b), side


def test_sub_steps_give_s_its_own_count_of_steps(cache):
    """warmup.sub_steps: S trains that many steps, M `steps`; the messages say both; the key changes only when set."""
    config = _config("warmup.steps=3", "warmup.sub_steps=2")
    assert warm_start_dir(config) != warm_start_dir(_config("warmup.steps=3"))
    said: list[str] = []
    steps: list[tuple[str, int]] = []
    _, start = resolve_warm_start(config, said.append, lambda side, step, loss: steps.append((side, step)))
    assert steps == [("main", 0), ("main", 1), ("main", 2), ("sub", 0), ("sub", 1)]
    assert [len(start.record["agents"][side]["losses"]) for side in ("main", "sub")] == [3, 2]
    assert "3 steps (S 2)" in said[0] and "3 supervised steps (S 2)" in said[-1]


def test_s_lr_schedule_follows_its_own_count(cache, monkeypatch):
    """S's supervised loop gets `sub_steps` as its steps, so its lr ramp and decay span S's steps, not M's."""
    from mgrpo_actors.warmup import web

    given = {}
    real = web.warm_up_trajectories

    def spy(model, trajectories, cfg, *args, **kwargs):
        given[len(given)] = cfg  # M first, then S
        return real(model, trajectories, cfg, *args, **kwargs)

    monkeypatch.setattr(web, "warm_up_trajectories", spy)
    config = _config("warmup.steps=4", "warmup.sub_steps=3", "warmup.lr_ramp_steps=1", "warmup.lr_decay=true")
    resolve_warm_start(config, lambda line: None)
    main, sub = given[0], given[1]
    assert (main.steps, sub.steps) == (4, 3)
    assert main.lr_factor(3) == pytest.approx(0.1) and sub.lr_factor(2) == pytest.approx(0.1)  # each ends its decay
    assert main.lr_factor(2) == pytest.approx(0.55)  # at S's last step M is halfway down its own


def test_sub_steps_are_not_in_the_key_where_they_change_nothing(cache):
    base = warm_start_dir(_config("warmup.steps=3"))
    assert warm_start_dir(_config("warmup.steps=3", "warmup.sub_steps=3")) == base  # S's count is `steps`
    single = _config("warmup.steps=3", "run.method=single-agent")
    assert warm_start_dir(_config("warmup.steps=3", "warmup.sub_steps=2", "run.method=single-agent")) == (
        warm_start_dir(single)
    )


def test_sub_steps_must_outlast_the_lr_ramp():
    with pytest.raises(ValueError, match="sub_steps"):
        _config("warmup.steps=300", "warmup.lr_ramp_steps=100", "warmup.sub_steps=100")
    assert _config("warmup.steps=300", "warmup.lr_ramp_steps=100", "warmup.sub_steps=101").warmup.steps_of("sub") == 101
    assert _config("warmup.steps=300").warmup.steps_of("sub") == 300
