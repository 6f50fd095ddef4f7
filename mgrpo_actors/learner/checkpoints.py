"""A learner's checkpoints (issue: "each learner saves model, optimizer and last applied batch id every
N steps"): DeepSpeed's own checkpoint (model, optimizer, ZeRO partitions) with the learner's record of
what it applied as client state, plus the model as a plain HF directory (loadable by transformers and
vLLM) beside it. Only the newest `keep` checkpoints stay on disk."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from mgrpo_actors.learner.trainer import PolicyTrainer
from mgrpo_actors.log import get_logger
from mgrpo_actors.phases import CHECKPOINT, timed
from mgrpo_actors.runtime.disk import disk_full, no_space_left

__all__ = ["Checkpoints", "export_hf"]

log = get_logger(__name__)

_LATEST = "latest"  # DeepSpeed's file naming the newest tag
_LAYOUT = "mgrpo-layout.json"  # the ZeRO stage and ranks a checkpoint was saved with


def _check_layout(tag_dir: Path, trainer: PolicyTrainer) -> None:
    """ValueError, before DeepSpeed reads anything, if the checkpoint in `tag_dir` was saved under another ZeRO
    stage or rank count than `trainer` runs: DeepSpeed cannot load one into the other (its optimizer state is
    laid out per stage and rank), and would fail deep inside with no word of why. A one-rank learner runs
    ZeRO-0 whatever learners.<side>.zero_stage says (trainer.zero_stage). No layout file: not checked."""
    path = tag_dir / _LAYOUT
    if not path.is_file():
        return
    saved = json.loads(path.read_text())
    now = {"zero_stage": trainer.zero_stage, "world_size": trainer.world_size}
    if saved != now:
        raise ValueError(
            f"checkpoint {tag_dir} was saved with ZeRO stage {saved.get('zero_stage')} on "
            f"{saved.get('world_size')} rank(s); this learner runs stage {now['zero_stage']} on "
            f"{now['world_size']} (one rank always runs stage 0): resume it with the same ranks, or start from its "
            f"model ({tag_dir / 'hf'}) as a new run"
        )


def export_hf(module: Any, state: dict[str, Any], tokenizer: Any, directory: Path) -> Path:
    """The model with weights `state` as a plain HF directory (a model spec: transformers, vLLM, mgrpo eval),
    written beside it and renamed into place, so a process killed meanwhile leaves no half directory."""
    partial = directory.with_name(f".{directory.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        module.save_pretrained(str(partial), state_dict=state, safe_serialization=True)
        tokenizer.save_pretrained(str(partial))
    except BaseException:  # a full disk, an interrupt: no half directory left behind
        shutil.rmtree(partial, ignore_errors=True)
        raise
    shutil.rmtree(directory, ignore_errors=True)
    partial.rename(directory)
    return directory


class Checkpoints:
    """The checkpoints of one learner under `directory` (<run dir>/checkpoints/<side>)."""

    def __init__(self, directory: Path, keep: int = 1) -> None:
        self.directory = Path(directory)
        self.keep = keep

    def latest(self) -> str | None:
        path = self.directory / _LATEST
        return path.read_text().strip() if path.is_file() else None

    def hf_dir(self, tag: str) -> Path:
        """The plain HF model directory of checkpoint `tag`."""
        return self.directory / tag / "hf"

    @timed(CHECKPOINT)
    def save(self, trainer: PolicyTrainer, tokenizer: Any, tag: str, record: dict[str, Any]) -> Path:
        """Model, optimizer and `record`; the HF directory; older checkpoints removed. Returns the HF dir."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            # every rank of the learner saves its part
            trainer.save_checkpoint(str(self.directory), tag, {"record": record})
            layout = {"zero_stage": trainer.zero_stage, "world_size": trainer.world_size}
            (self.directory / tag / _LAYOUT).write_text(json.dumps(layout))
            hf = export_hf(trainer.module, trainer.full_state_dict(), tokenizer, self.hf_dir(tag))
        except Exception as exc:  # a short write: torch's zip writer says RuntimeError, safetensors its own error
            full = no_space_left(exc, self.directory)  # before the partial files go and free the space again
            self._remove_partial(tag)
            if full:
                raise disk_full(f"checkpoint {tag}", self.directory / tag) from exc
            raise
        self._prune(keep=tag)
        return hf

    def _remove_partial(self, tag: str) -> None:
        """What a failed save of `tag` left; `latest` (DeepSpeed's pointer, written once its own part was saved)
        then names the newest complete checkpoint again, or nothing."""
        shutil.rmtree(self.directory / tag, ignore_errors=True)
        log.warning("partial checkpoint removed", directory=str(self.directory / tag))
        if self.latest() != tag:
            return
        complete = [p for p in self.directory.iterdir() if (p / _LAYOUT).is_file() and (p / "hf").is_dir()]
        latest = self.directory / _LATEST
        if complete:
            latest.write_text(max(complete, key=lambda p: p.stat().st_mtime).name)
        else:
            latest.unlink(missing_ok=True)

    def load(self, trainer: PolicyTrainer) -> dict[str, Any] | None:
        """Restore the newest checkpoint into `trainer`; its record, or None when there is none."""
        tag = self.latest()
        if tag is None:
            return None
        _check_layout(self.directory / tag, trainer)
        _, client_state = trainer.engine.load_checkpoint(str(self.directory), tag=tag)
        if client_state is None or "record" not in client_state:
            raise ValueError(f"checkpoint {self.directory / tag} has no learner record")
        log.info("checkpoint loaded", directory=str(self.directory), tag=tag)
        return dict(client_state["record"])

    def _prune(self, keep: str) -> None:
        tags = sorted((p for p in self.directory.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
        for old in [p for p in tags if p.name != keep][: max(0, len(tags) - self.keep)]:
            shutil.rmtree(old, ignore_errors=True)
