"""Models for the agents: tiny test models, SmolLM2-135M-Instruct from its GGUF wheel, local HF directories."""

from mgrpo_actors.models.loader import KNOWN_SPECS, ModelSpecError, load_model, resolve_model_dir

__all__ = ["KNOWN_SPECS", "ModelSpecError", "load_model", "resolve_model_dir"]
