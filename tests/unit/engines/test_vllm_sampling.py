"""What the vllm engine runs inside vLLM's processes, without vLLM: the logits processor's rows and masking (top-k
keeps the tokens tied with the k-th, as the learner's warpers do; vLLM's Triton kernel keeps exactly k), and the
worker extension's reload on a model whose weights vLLM left as loaded."""

from enum import Enum
from types import SimpleNamespace

import pytest
import torch

from mgrpo_actors.engines import SamplingParams
from mgrpo_actors.engines.logprobs import sampling_log_probs
from mgrpo_actors.engines.vllm_sampling import EXTRA_ARGS_KEY, RowWarpers, warper_args
from mgrpo_actors.engines.vllm_worker import WeightsWorkerExtension


class Move(Enum):
    UNIDIRECTIONAL = 1
    SWAP = 2


def request(top_k: int, top_p: float, temperature: float = 1.0):
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    return SimpleNamespace(temperature=temperature, extra_args=warper_args(params))


def update(added=(), removed=(), moved=()):
    return SimpleNamespace(batch_size=8, added=list(added), removed=list(removed), moved=list(moved))


def test_warper_args_only_when_something_is_cut():
    assert warper_args(SamplingParams(top_k=5, top_p=0.9)) == {EXTRA_ARGS_KEY: [5, 0.9]}
    assert warper_args(SamplingParams()) is None
    assert warper_args(SamplingParams(temperature=0.0, top_k=5)) is None  # greedy ignores them


def test_rows_follow_vllms_batch_updates():
    warpers = RowWarpers()
    warpers.update(
        update(added=[(0, request(5, 1.0), [1], []), (1, request(3, 0.8), [1], []), (2, request(0, 1.0), [])])
    )
    assert warpers.rows == {0: (5, 1.0), 1: (3, 0.8)}  # row 2 cuts nothing; 3-tuples are vLLM 0.10's
    warpers.update(update(moved=[(0, 1, Move.SWAP)]))
    assert warpers.rows == {0: (3, 0.8), 1: (5, 1.0)}
    warpers.update(update(moved=[(1, 4, Move.UNIDIRECTIONAL)]))
    assert warpers.rows == {0: (3, 0.8), 4: (5, 1.0)}
    warpers.update(update(removed=[0], added=[(0, request(5, 1.0, temperature=0.0), [], [])]))
    assert warpers.rows == {4: (5, 1.0)}  # a greedy request in a reused slot has no warpers
    warpers.update(None)
    assert warpers.rows == {4: (5, 1.0)}


def test_top_k_keeps_ties_and_matches_the_learners_distribution():
    logits = torch.tensor([[4.0, 3.0, 3.0, 3.0, 1.0, 0.5], [2.0, 1.0, 0.0, -1.0, -2.0, -3.0]])
    warpers = RowWarpers()
    warpers.update(update(added=[(0, request(2, 1.0), [], []), (1, request(3, 0.9), [], [])]))
    masked = warpers.apply(logits.clone())
    assert torch.isfinite(masked[0]).tolist() == [True, True, True, True, False, False]  # k=2 keeps the 3-way tie
    for row, (k, p) in enumerate([(2, 1.0), (3, 0.9)]):
        expected = sampling_log_probs(logits[row], SamplingParams(top_k=k, top_p=p))
        torch.testing.assert_close(torch.log_softmax(masked[row], -1), expected)


def test_rows_without_warpers_are_left_alone():
    logits = torch.randn(3, 10)
    warpers = RowWarpers()
    warpers.update(update(added=[(1, request(2, 1.0), [], [])]))
    masked = warpers.apply(logits.clone())
    torch.testing.assert_close(masked[[0, 2]], logits[[0, 2]])
    assert int(torch.isfinite(masked[1]).sum()) == 2


class PlainModel(torch.nn.Module):
    """A model whose weights vLLM left as loaded (vLLM on CUDA): load_weights names what it set."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Parameter(torch.zeros(2))
        self.b = torch.nn.Parameter(torch.zeros(3))

    def load_weights(self, weights):
        loaded = set()
        for name, tensor in weights:
            getattr(self, name).data.copy_(tensor)
            loaded.add(name)
        return loaded


def test_the_worker_loads_in_place_and_a_complete_load_must_set_every_parameter(tmp_path):
    from safetensors.torch import save_file

    model = PlainModel()
    worker = WeightsWorkerExtension()
    worker.model_runner = SimpleNamespace(get_model=lambda: model)
    save_file({"a": torch.ones(2)}, str(tmp_path / "a.safetensors"))
    assert worker.mgrpo_load_weights([str(tmp_path / "a.safetensors")], complete=False) == 1
    assert model.a.tolist() == [1.0, 1.0] and model.b.tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(RuntimeError, match="left 1 parameters of the running model unset: \\['b'\\]"):
        worker.mgrpo_load_weights([str(tmp_path / "a.safetensors")], complete=True)
