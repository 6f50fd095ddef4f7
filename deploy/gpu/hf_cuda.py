"""The hf engine and a learner on one CUDA GPU, without vLLM (deploy/gpu/check.sh runs it; so does a GPU host
whose venv has no vLLM): one JSON line per figure.

1. `gap`: the hf engine on CUDA samples a mixed-length batch (stop ids, rows ending early), then a second turn
   of each row from the engine's kept cache; a learner (PolicyTrainer, DeepSpeed on nccl, one rank) on the same
   GPU scores every sampled token under the same warpers. Largest and mean |behaviour - learner| logprob per
   token, in float32 and in bfloat16 (engine and learner in the same dtype), and the same float32 engine's
   tokens scored by a float32 learner on the CPU.
2. `step`: that learner trains one step on those samples (advantages ±1); its new weights go to the engine as a
   delta against the version the engine holds (weights/delta.py, the wire's rule), the engine's weights are
   then checked bit for bit against the learner's, and it samples again at the new version, the gap measured.
3. `throughput`: generated tokens/s of the hf engine beside plain `model.generate` on the same GPU, same
   prompts, sampling, stop ids and budget, SmolLM2-135M's shape (its config, random weights: no checkpoint
   needs to travel), bfloat16, batch 1, 8, 32 and 128; medians of repeats, sides alternating.

    python deploy/gpu/hf_cuda.py                  # every section on cuda
    python deploy/gpu/hf_cuda.py --device cpu     # the same on the CPU: a check of the script itself
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
import torch

from mgrpo_actors.alignment.batch_rows import BatchRow, rows_to_batch
from mgrpo_actors.engines import EngineConfig, SamplingParams
from mgrpo_actors.engines.hf import HFEngine
from mgrpo_actors.learner.forward import micro_batch_log_probs, no_dropout
from mgrpo_actors.learner.micro_batches import micro_batches
from mgrpo_actors.weights.delta import WeightsDelta, apply_delta, change_of

TEXTS = (
    "Who wrote the book about the river?",
    "Find the capital founded by Aldora in the first year, then answer.",
    "search",
    "Which company built the bridge near Dunmore, and when was it rebuilt after the flood?",
)
# SmolLM2-135M-Instruct's architecture (its config.json): the throughput section builds it with random weights.
SMOLLM2_SHAPE = dict(
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    vocab_size=49152,
    max_position_embeddings=8192,
    rope_theta=100000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
)


def emit(**figures: object) -> None:
    print(json.dumps(figures), flush=True)


def _prompt(tokenizer, text: str) -> list[int]:
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
    return list(ids if isinstance(ids, list) else ids["input_ids"])


def _trainer(model, tokenizer, device: str, dtype: str):
    from mgrpo_actors.algo.config import ObjectiveConfig
    from mgrpo_actors.config.learner import LearnerConfig
    from mgrpo_actors.learner.trainer import PolicyTrainer

    cfg = LearnerConfig(device=device, dtype=dtype, lr=1e-3, micro_batch_samples=16)
    return PolicyTrainer(model, tokenizer.pad_token_id, cfg, ObjectiveConfig())


def _sampled_rows(engine: HFEngine, tokenizer, params: SamplingParams) -> tuple[list[BatchRow], list[np.ndarray]]:
    """Two turns per prompt: the first sampled, then a user message, then the second from the kept cache. Rows:
    the whole conversation, only the sampled tokens on the loss mask, with their behaviour logprobs."""
    prompts = [_prompt(tokenizer, text) for text in TEXTS]
    first = engine.generate(prompts, params)
    follow = _prompt(tokenizer, "Go on.")
    seconds = [p + g.token_ids + follow for p, g in zip(prompts, first, strict=True)]
    second = engine.generate(seconds, params)
    rows, behaviour = [], []
    for i, (prompt, one, two) in enumerate(zip(seconds, first, second, strict=True)):
        ids = np.array(prompt + two.token_ids, np.int32)
        mask = np.zeros(len(ids), np.uint8)
        logprobs = np.zeros(len(ids), np.float32)
        start = len(prompts[i])
        mask[start : start + len(one.token_ids)] = 1
        logprobs[start : start + len(one.token_ids)] = one.logprobs
        mask[len(prompt) :] = 1
        logprobs[len(prompt) :] = two.logprobs
        advantage = 1.0 if i % 2 == 0 else -1.0
        rows.append(
            BatchRow(f"q/a/r{i}", "original", ids, mask, logprobs, advantage, 1.0, 0.0, 0, *_warpers(params), group=0)
        )
        behaviour.append(logprobs[mask > 0])
    return rows, behaviour


def _warpers(params: SamplingParams) -> tuple[float, float, int]:
    return params.temperature, params.top_p, params.top_k


def _scored(module, rows: list[BatchRow], pad_id: int, device) -> list[np.ndarray]:
    """The learner's logprobs of each row's loss tokens (its forward, warpers and log-softmax, dropout off)."""
    batch = rows_to_batch("r", "main", 0, "b", rows)
    (mb,) = micro_batches(batch, len(rows), pad_id)
    no_dropout(module)  # as the learner scores
    with torch.no_grad():
        logprobs = micro_batch_log_probs(module, module, mb, None, device).float().cpu().numpy()
    mask = mb.loss_mask.numpy() > 0
    at = {sample: r for r, sample in enumerate(mb.sample_ids)}  # micro-batches order rows longest first
    return [logprobs[at[row.sample_id]][mask[at[row.sample_id]]] for row in rows]


def _gap(behaviour: list[np.ndarray], scored: list[np.ndarray]) -> dict[str, float]:
    """|behaviour - learner| per sampled token; a token the learner puts outside its top-k/top-p (logprob -inf:
    another precision can move the nucleus's edge) is counted apart, not averaged."""
    diffs = np.concatenate([np.abs(b - s) for b, s in zip(behaviour, scored, strict=True)])
    finite = diffs[np.isfinite(diffs)]
    return {
        "tokens": int(diffs.size),
        "outside_learner_nucleus": int(diffs.size - finite.size),
        "max_abs": float(finite.max()),
        "mean_abs": float(finite.mean()),
    }


def gap_and_step(device: str, dtype: str, spec: str) -> None:
    from mgrpo_actors.models.loader import load_model

    model, tokenizer = load_model(spec)
    engine = HFEngine(model, tokenizer, cfg=EngineConfig(device=device, dtype=dtype))
    assert engine.row_cache, f"{spec} does not decode on the engine's own cache"
    params = SamplingParams(temperature=1.0, top_k=50, top_p=0.95, max_new_tokens=32, seed=11)
    rows, behaviour = _sampled_rows(engine, tokenizer, params)
    learner_model, _ = load_model(spec)
    trainer = _trainer(learner_model, tokenizer, device, dtype)
    scored = _scored(trainer.engine, rows, tokenizer.pad_token_id, trainer.engine.device)
    finish = [len(r.token_ids) for r in rows]
    emit(section="gap", device=device, dtype=dtype, model=spec, row_tokens=finish, **_gap(behaviour, scored))
    if dtype == "float32" and device != "cpu":
        cpu_model, _ = load_model(spec)
        emit(
            section="gap",
            device="cpu learner",
            dtype=dtype,
            **_gap(behaviour, _scored(cpu_model.float(), rows, tokenizer.pad_token_id, "cpu")),
        )

    # One learner step, its weights to the engine as a delta, checked bit for bit.
    before = {name: t.detach().to("cpu", copy=True) for name, t in trainer.full_state_dict().items()}
    started = time.perf_counter()
    stats = trainer.apply(rows_to_batch("r", "main", 0, "b", rows))
    step_s = time.perf_counter() - started
    after = {name: t.detach().to("cpu", copy=True) for name, t in trainer.full_state_dict().items()}
    changes = {name: change_of(before[name], tensor) for name, tensor in after.items()}
    whole = {n: c for n, c in changes.items() if isinstance(c, torch.Tensor)}
    sparse = {n: c for n, c in changes.items() if c is not None and not isinstance(c, torch.Tensor)}
    delta = WeightsDelta(version=1, base=0, base_sha256="", whole=whole, sparse=sparse)
    engine.load_weights(delta, 1)
    rebuilt = dict(before)
    apply_delta(rebuilt, delta)
    engine_state = {n: t.detach().cpu() for n, t in engine.model.state_dict().items()}
    exact = all(torch.equal(rebuilt[n], after[n]) for n in after) and all(
        torch.equal(engine_state[n], after[n]) for n in after if n in engine_state
    )
    changed = sum(1 for c in changes.values() if c is not None)
    rows2, behaviour2 = _sampled_rows(engine, tokenizer, params)
    scored2 = _scored(trainer.engine, rows2, tokenizer.pad_token_id, trainer.engine.device)
    emit(
        section="step",
        device=device,
        dtype=dtype,
        step_s=round(step_s, 3),
        loss=getattr(stats, "loss", None),
        tensors_changed=changed,
        of_tensors=len(after),
        engine_bit_exact=exact,
        **{f"gap_after_{k}": v for k, v in _gap(behaviour2, scored2).items()},
    )
    del engine, trainer


def throughput(device: str, batches: list[int], new_tokens: int, repeats: int, spec: str) -> None:
    from transformers import AutoModelForCausalLM, LlamaConfig

    from mgrpo_actors.bench.rollout import _plain_generate, _prompts
    from mgrpo_actors.models.loader import load_model

    _, tokenizer = load_model(spec)  # a chat template and stop ids; the model below is SmolLM2's shape
    config = LlamaConfig(
        **SMOLLM2_SHAPE,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    models = [AutoModelForCausalLM.from_config(config).to(device=device, dtype=torch.bfloat16).eval() for _ in "ab"]
    engine = HFEngine(models[0], tokenizer)
    plain = models[1]
    plain.generation_config = engine.model.generation_config
    for batch in batches:
        prompts = _prompts(tokenizer, batch)
        rates: dict[str, list[float]] = {"hf": [], "generate": []}
        for i in range(repeats + 1):  # call 0 of each side warms up
            for side in ("hf", "generate") if i % 2 else ("generate", "hf"):
                params = SamplingParams(temperature=1.0, top_k=50, top_p=0.95, max_new_tokens=new_tokens, seed=i)
                if device != "cpu":
                    torch.cuda.synchronize()
                started = time.perf_counter()
                if side == "hf":
                    engine.cache = None  # every call cold, as generate's
                    tokens = sum(len(g.token_ids) for g in engine.generate(prompts, params))
                else:
                    tokens = sum(
                        len(r)
                        for r in _plain_generate(plain, engine.pad_token_id, engine.eos_token_ids, prompts, params)
                    )
                if device != "cpu":
                    torch.cuda.synchronize()
                if i:
                    rates[side].append(tokens / (time.perf_counter() - started))
        hf, gen = statistics.median(rates["hf"]), statistics.median(rates["generate"])
        emit(
            section="throughput",
            device=device,
            model="SmolLM2-135M shape, random weights, bfloat16",
            batch=batch,
            max_new_tokens=new_tokens,
            hf_tokens_per_s=round(hf, 1),
            generate_tokens_per_s=round(gen, 1),
            ratio=round(hf / gen, 3),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--model", default="tiny:main32")
    parser.add_argument("--sections", default="gap,throughput")
    parser.add_argument("--batches", default="1,8,32,128")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.device != "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cuda")
        emit(section="host", gpu=torch.cuda.get_device_name(0), torch=torch.__version__, cuda=torch.version.cuda)
    sections = args.sections.split(",")
    if "gap" in sections:
        for dtype in ("float32", "bfloat16"):
            gap_and_step(args.device, dtype, args.model)
    if "throughput" in sections:
        batches = [int(b) for b in args.batches.split(",")]
        throughput(args.device, batches, args.max_new_tokens, args.repeats, args.model)


if __name__ == "__main__":
    main()
