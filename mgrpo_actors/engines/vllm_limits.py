"""What the `vllm` engine can sample exactly as the learner scores it, checked without importing vLLM (the agent
config checks it at load, the engine on every call).

vLLM changes some temperatures behind the logprobs' back: it rejects T > 2 (0.32 and later), raises
0 < T < 0.01 to 0.01 (with a log warning) and decodes T < 1e-5 greedily, while our warpers
(logprobs.py) divide by the T asked for. So the engine takes T = 0 (greedy) or 0.01 <= T <= 2, and
refuses anything else instead of sampling one distribution and reporting another.
"""

from __future__ import annotations

__all__ = ["VLLM_MAX_TEMPERATURE", "VLLM_MIN_TEMPERATURE", "vllm_temperature_error"]

VLLM_MIN_TEMPERATURE = 1e-2  # vLLM's _MAX_TEMP: a smaller positive temperature is raised to this
VLLM_MAX_TEMPERATURE = 2.0  # vLLM's SamplingParams rejects more (0.32, 0.33)


def vllm_temperature_error(temperature: float) -> str | None:
    """Why vLLM would not sample at `temperature` as asked, or None when it does."""
    if temperature == 0.0 or VLLM_MIN_TEMPERATURE <= temperature <= VLLM_MAX_TEMPERATURE:
        return None
    return (
        f"temperature {temperature!r} is not sampled as asked by vLLM, which takes 0 (greedy) or "
        f"{VLLM_MIN_TEMPERATURE} to {VLLM_MAX_TEMPERATURE} (it raises smaller positive values to "
        f"{VLLM_MIN_TEMPERATURE}, decodes below 1e-5 greedily and rejects more than {VLLM_MAX_TEMPERATURE}); the "
        "behaviour logprobs would not be those of the distribution sampled: use engine hf for it"
    )
