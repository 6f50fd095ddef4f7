"""The vllm engine's own logic, on a stand-in `vllm` module (no vLLM in the main venv; tests/vllm/ runs the real
one, `make test-vllm`): stop ids and finish reasons as the hf engine's, aborted requests, the settings vLLM
starts with, reloads checked before anything is copied, the prefix cache, temperatures vLLM would change,
top-k/top-p by our warpers, placement, and the agent's loading without a transformers copy."""

import json
import sys
import types
import weakref
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from transformers import GenerationConfig

from mgrpo_actors.agents.setup import load_agent
from mgrpo_actors.config.agents import AgentConfig, VLLMConfig
from mgrpo_actors.engines import EngineConfig, SamplingParams, make_engine
from mgrpo_actors.engines.eos import eos_token_ids
from mgrpo_actors.engines.vllm import LOGITS_PROCESSOR, WORKER_EXTENSION, cuda_visible_devices, memory_error
from mgrpo_actors.engines.vllm_sampling import EXTRA_ARGS_KEY
from mgrpo_actors.models.loader import load_model, resolve_model_dir

IM_END, ENDOFTEXT = 2, 0  # the tiny tokenizer's eos, and a second end-of-turn id a checkpoint may list


class FakeLLM:
    """Records what the engine asks of vllm.LLM; answers every request with `tokens` and `finish_reason`.
    Deliberately has no `apply_model`: the engine must reload through `collective_rpc` by method name."""

    finish_reason = "stop"
    tokens = (7, IM_END)
    reset_answers: list[bool] = []  # what reset_prefix_cache answers, in turn (then True)

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.visible_at_start = __import__("os").environ.get("CUDA_VISIBLE_DEVICES")
        self.sampling = []
        self.rpcs = []
        self.resets = 0
        self.answers = list(self.reset_answers)

    def generate(self, requests, sampling, use_tqdm):
        self.sampling = sampling
        step = lambda token, logprob: {token: SimpleNamespace(logprob=logprob)}  # noqa: E731
        ids = list(self.tokens)
        completion = SimpleNamespace(
            token_ids=ids, logprobs=[step(t, -0.5) for t in ids], finish_reason=self.finish_reason
        )
        return [SimpleNamespace(outputs=[completion]) for _ in requests]

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        assert isinstance(method, str), "a callable would need VLLM_ALLOW_INSECURE_SERIALIZATION"
        self.rpcs.append((method, args))
        return [3]

    def reset_prefix_cache(self):
        self.resets += 1
        return self.answers.pop(0) if self.answers else True


@pytest.fixture()
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM = FakeLLM
    module.SamplingParams = lambda **kwargs: SimpleNamespace(**kwargs)
    module.platforms = SimpleNamespace(current_platform=SimpleNamespace(is_cpu=lambda: True))
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setattr(FakeLLM, "reset_answers", [])
    return module


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny:main")


@pytest.fixture()
def checkpoint(tmp_path, tiny):
    """A model directory (the tiny model's weights) whose generation config ends turns on two ids."""
    model, _ = tiny
    model.save_pretrained(tmp_path)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [IM_END, ENDOFTEXT]}))
    return tmp_path


def test_eos_ids_are_the_tokenizers_and_the_generation_configs(tiny):
    _, tokenizer = tiny
    assert eos_token_ids(tokenizer, GenerationConfig(eos_token_id=[ENDOFTEXT, 5])) == {IM_END, ENDOFTEXT, 5}
    assert eos_token_ids(tokenizer, GenerationConfig(eos_token_id=ENDOFTEXT)) == {IM_END, ENDOFTEXT}
    assert eos_token_ids(tokenizer, None) == {IM_END}


def test_vllm_stops_on_the_same_eos_ids_as_hf(fake_vllm, tiny, checkpoint):
    model, tokenizer = tiny
    model.generation_config.eos_token_id = [IM_END, ENDOFTEXT]
    hf = make_engine("hf", model, tokenizer)
    vllm = make_engine("vllm", checkpoint, tokenizer)
    assert vllm.eos_token_ids == hf.eos_token_ids == {IM_END, ENDOFTEXT}
    (generation,) = vllm.generate([[1, 5]], SamplingParams(stop_token_ids=(9,), seed=3))
    (sampling,) = vllm.llm.sampling
    assert sampling.stop_token_ids == [ENDOFTEXT, IM_END, 9]
    assert (generation.token_ids, generation.finish_reason) == ([7, IM_END], "stop")
    np.testing.assert_array_equal(generation.logprobs, np.array([-0.5, -0.5], dtype=np.float32))


def test_vllm_starts_with_our_plugins_by_name_and_the_configured_memory(fake_vllm, tiny, checkpoint, monkeypatch):
    monkeypatch.setenv("VLLM_ALLOW_INSECURE_SERIALIZATION", "0")  # item 9: an explicit 0 must not matter
    cfg = EngineConfig(dtype="float32", gpu_memory_utilization=0.55, max_model_len=4096, enforce_eager=True)
    engine = make_engine("vllm", checkpoint, tiny[1], cfg)
    kwargs = engine.llm.kwargs
    assert (kwargs["worker_extension_cls"], kwargs["logits_processors"]) == (WORKER_EXTENSION, [LOGITS_PROCESSOR])
    assert (kwargs["gpu_memory_utilization"], kwargs["max_model_len"], kwargs["enforce_eager"]) == (0.55, 4096, True)
    assert (kwargs["logprobs_mode"], kwargs["generation_config"], kwargs["dtype"]) == (
        "processed_logprobs",
        "vllm",
        "float32",
    )
    import os

    assert os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] == "0"


@pytest.mark.parametrize("reason", ["abort", None])
def test_a_request_vllm_did_not_finish_is_an_error(fake_vllm, tiny, checkpoint, monkeypatch, reason):
    engine = make_engine("vllm", checkpoint, tiny[1])
    monkeypatch.setattr(FakeLLM, "finish_reason", reason)
    with pytest.raises(RuntimeError, match=f"vLLM did not finish a request \\(finish reason {reason!r}\\)"):
        engine.generate([[1, 5]], SamplingParams())
    monkeypatch.setattr(FakeLLM, "finish_reason", "length")
    monkeypatch.setattr(FakeLLM, "tokens", (7, 8))
    assert engine.generate([[1, 5]], SamplingParams())[0].finish_reason == "length"


def test_a_stop_id_sampled_as_the_last_allowed_token_finishes_by_stop(fake_vllm, tiny, checkpoint, monkeypatch):
    # vLLM 0.10.2 reports "length" here; the hf engine (and the trajectory builder after it) says "stop".
    engine = make_engine("vllm", checkpoint, tiny[1])
    monkeypatch.setattr(FakeLLM, "finish_reason", "length")
    (generation,) = engine.generate([[1, 5]], SamplingParams(max_new_tokens=2))
    assert (generation.token_ids, generation.finish_reason) == ([7, IM_END], "stop")
    monkeypatch.setattr(FakeLLM, "tokens", (7, 9))
    (generation,) = engine.generate([[1, 5]], SamplingParams(max_new_tokens=2, stop_token_ids=(9,)))
    assert generation.finish_reason == "stop"


def test_top_k_and_top_p_go_to_our_logits_processor_not_to_vllm(fake_vllm, tiny, checkpoint):
    engine = make_engine("vllm", checkpoint, tiny[1])
    engine.generate([[1, 5], [1, 6]], SamplingParams(temperature=0.7, top_k=5, top_p=0.9, seed=10))
    for index, sampling in enumerate(engine.llm.sampling):
        assert not hasattr(sampling, "top_k") and not hasattr(sampling, "top_p")  # vLLM's own stay off
        assert sampling.extra_args == {EXTRA_ARGS_KEY: [5, 0.9]} and sampling.seed == 10 + index
        assert sampling.temperature == 0.7 and sampling.logprobs == 0 and sampling.detokenize is False
    engine.generate([[1, 5]], SamplingParams(temperature=0.0, top_k=5))
    assert engine.llm.sampling[0].extra_args is None  # greedy: no warpers


@pytest.mark.parametrize("temperature", [2.5, 0.005, 1e-6])
def test_temperatures_vllm_would_change_are_refused(fake_vllm, tiny, checkpoint, temperature):
    engine = make_engine("vllm", checkpoint, tiny[1])
    with pytest.raises(ValueError, match="not sampled as asked by vLLM"):
        engine.generate([[1, 5]], SamplingParams(temperature=temperature))
    with pytest.raises(ValueError, match="agent temperature .* not sampled as asked by vLLM"):
        AgentConfig(engine="vllm", temperature=temperature)
    assert AgentConfig(engine="hf", temperature=temperature).temperature == temperature
    for fine in (0.0, 0.01, 1.0, 2.0):
        assert AgentConfig(engine="vllm", temperature=fine).temperature == fine


def _state(model) -> dict[str, torch.Tensor]:
    return {name: tensor.clone() for name, tensor in model.state_dict().items() if name != "lm_head.weight"}


def test_a_reload_checks_names_and_shapes_before_anything_is_copied(fake_vllm, tiny, checkpoint, tmp_path):
    model, tokenizer = tiny
    engine = make_engine("vllm", checkpoint, tokenizer)
    full = _state(model)
    first = next(iter(full))
    bad = {
        "missing": {name: t for name, t in full.items() if name != first},
        "unknown": {**full, "model.layers.9.mlp.up_proj.weight": torch.zeros(1)},
        "misshapen": {**full, first: torch.zeros(3, 3)},
    }
    for what, state in bad.items():
        file = tmp_path / f"{what}.safetensors"
        save_file(state, str(file))
        with pytest.raises(ValueError, match="weights do not fit the model.*nothing was loaded"):
            engine.load_weights(file, 1)
    with pytest.raises(ValueError, match="unknown|unexpected"):
        engine.load_weights(bad["unknown"], 1)  # a state dict may be partial, never unknown
    assert engine.llm.rpcs == [] and engine.llm.resets == 0 and engine.policy_version == 0

    save_file(full, str(tmp_path / "full.safetensors"))
    engine.load_weights(tmp_path / "full.safetensors", 1)  # a tied lm_head may be left out
    engine.load_weights({first: full[first] + 1}, 2)  # the changed tensors alone (weights/sync.py)
    (method, (files, complete)), (_, (_, partial_complete)) = engine.llm.rpcs
    assert method == "mgrpo_load_weights" and files == [str(tmp_path / "full.safetensors")] and complete is True
    assert partial_complete is False and engine.policy_version == 2
    engine.load_weights({}, 3)  # a delta that changed nothing (weights/sync.py): adopted, nothing copied or reset
    assert len(engine.llm.rpcs) == 2 and engine.llm.resets == 4 and engine.policy_version == 3


def test_a_prefix_cache_vllm_cannot_empty_is_never_served_under_a_new_version(fake_vllm, tiny, checkpoint, monkeypatch):
    model, tokenizer = tiny
    engine = make_engine("vllm", checkpoint, tokenizer)
    state = _state(model)
    engine.llm.answers = [False]  # blocks in use before copying: refused, nothing copied
    with pytest.raises(RuntimeError, match="could not empty its prefix cache.*nothing was copied"):
        engine.load_weights(state, 1)
    assert engine.llm.rpcs == [] and engine.policy_version == 0
    engine.generate([[1, 5]], SamplingParams())  # still version 0, still usable

    engine.llm.answers = [True, False]  # copied, then the cache would not empty: the engine refuses to generate
    with pytest.raises(RuntimeError, match="may serve KV computed by the old weights"):
        engine.load_weights(state, 1)
    assert engine.policy_version == 0
    with pytest.raises(RuntimeError, match="may serve KV computed by the old weights"):
        engine.generate([[1, 5]], SamplingParams())
    engine.load_weights(state, 1)  # a reload that completes makes it usable again
    assert engine.generate([[1, 5]], SamplingParams())[0].policy_version == 1


class FakeEngineCore:
    """Stands for vLLM's engine core client (`LLM.llm_engine.engine_core`): counts shutdowns."""

    def __init__(self):
        self.shutdowns = 0

    def shutdown(self, timeout=None):
        self.shutdowns += 1


def test_vllms_processes_are_stopped_at_exit_or_by_close(fake_vllm, tiny, checkpoint, monkeypatch):
    # vLLM's engine core is a non-daemon process: one not stopped before multiprocessing's exit hook joins it
    # hangs the program after its last line (an agent's engine in `mgrpo run`).
    hooks = []
    monkeypatch.setattr("atexit.register", hooks.append)
    monkeypatch.setattr("atexit.unregister", hooks.remove)
    monkeypatch.setattr(FakeLLM, "llm_engine", None, raising=False)
    bare = make_engine("vllm", checkpoint, tiny[1])  # no engine core process to stop: nothing registered
    assert hooks == []
    bare.close()

    core = FakeEngineCore()
    monkeypatch.setattr(FakeLLM, "llm_engine", SimpleNamespace(engine_core=core))
    engine = make_engine("vllm", checkpoint, tiny[1])
    (hook,) = hooks
    hook()  # what atexit runs
    assert core.shutdowns == 1
    engine.close()
    engine.close()
    assert hooks == [] and core.shutdowns == 2  # close stops it now and leaves no hook behind; twice is once
    with pytest.raises(RuntimeError, match="the engine is closed"):
        engine.generate([[1, 5]], SamplingParams())
    with pytest.raises(RuntimeError, match="the engine is closed"):
        engine.load_weights({}, 1)

    other = make_engine("vllm", checkpoint, tiny[1])
    (hook,) = hooks
    FakeLLM.llm_engine = None  # not by monkeypatch, which would hold the client to put it back (undone anyway)
    gone = weakref.ref(core)
    del other, engine, core
    assert gone() is None  # the hook holds the client weakly: it keeps nothing alive, and then does nothing
    hook()


def test_cuda_device_becomes_the_gpu_vllm_sees_as_its_first():
    assert cuda_visible_devices("cuda:1", cpu_build=False, visible=None) == "1"
    assert cuda_visible_devices("cuda:1", cpu_build=False, visible="4,6") == "6"
    assert cuda_visible_devices("cuda", cpu_build=False, visible="4,6") is None
    assert cuda_visible_devices(None, cpu_build=False, visible=None) is None
    assert cuda_visible_devices("cpu", cpu_build=True, visible=None) is None
    with pytest.raises(ValueError, match="only 2 GPU"):
        cuda_visible_devices("cuda:2", cpu_build=False, visible="4,6")
    with pytest.raises(ValueError, match="runs on a CUDA device"):
        cuda_visible_devices("cpu", cpu_build=False, visible=None)
    with pytest.raises(ValueError, match="CPU build"):
        cuda_visible_devices("cuda:0", cpu_build=True, visible=None)


def test_vllm_starts_its_processes_on_the_configured_gpu(fake_vllm, tiny, checkpoint, monkeypatch):
    fake_vllm.platforms = SimpleNamespace(current_platform=SimpleNamespace(is_cpu=lambda: False))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    engine = make_engine("vllm", checkpoint, tiny[1], EngineConfig(device="cuda:1"))
    assert engine.llm.visible_at_start == "3"  # what vLLM's processes inherit
    import os

    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,3"  # restored in this process


def test_too_little_free_gpu_memory_is_said_before_vllm_starts():
    gib = 1024**3
    assert memory_error(free=50 * gib, total=140 * gib, share=0.3) is None
    message = memory_error(free=30 * gib, total=140 * gib, share=0.3)
    assert "42.0 GiB of 140.0 GiB" in message and "vllm.gpu_memory_utilization to at most 0.21" in message


def test_the_agent_gives_vllm_the_directory_and_its_settings_without_loading_the_model(fake_vllm, monkeypatch):
    def no_model(*args, **kwargs):
        raise AssertionError("the vllm engine must not get a transformers copy of the model")

    monkeypatch.setattr("mgrpo_actors.agents.setup.load_model", no_model)
    cfg = AgentConfig(model="tiny:main", engine="vllm", vllm=VLLMConfig(gpu_memory_utilization=0.6, max_model_len=2048))
    agent = load_agent(cfg)
    kwargs = agent.engine.llm.kwargs
    assert kwargs["model"] == str(resolve_model_dir("tiny:main")) and kwargs["dtype"] == "float32"
    assert (kwargs["gpu_memory_utilization"], kwargs["max_model_len"], kwargs["enforce_eager"]) == (0.6, 2048, False)
    with pytest.raises(ValueError, match="gpu_memory_utilization must be in"):
        VLLMConfig(gpu_memory_utilization=1.5)
