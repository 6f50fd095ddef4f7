"""The embedded nats-server of one run (`mgrpo run`, `mgrpo-node --role all` without --nats): its store in
`<run.dir>/<run.id>/nats`, its one user the run's own (runtime/run_credentials.py), and its URL recorded
beside that user so the run's other clients find it."""

from __future__ import annotations

import shutil
import urllib.parse
from pathlib import Path

from mgrpo_actors.log import get_logger
from mgrpo_actors.runtime.disk import disk_full, no_space_left
from mgrpo_actors.runtime.embedded import EmbeddedNats
from mgrpo_actors.runtime.run_credentials import RunCredentials, credentials_path, run_credentials, save_run_credentials

__all__ = ["start_run_server"]

log = get_logger(__name__)


def _clear_for_a_fresh_run(run_dir: Path) -> None:
    """A fresh run under an id that ran before: its store, checkpoints and credentials go."""
    if run_dir.exists():
        log.warning(
            "starting a fresh run: removing the earlier one's directory (use --resume to continue it)",
            run_dir=str(run_dir),
        )
        shutil.rmtree(run_dir)


def _earlier_port(url: str) -> int | None:
    try:
        return urllib.parse.urlparse(url).port if url else None
    except ValueError:
        return None


def _start(store: Path, credentials: RunCredentials, max_payload: int, memory_limit_mib: int) -> EmbeddedNats:
    """The server on the port it had before (a resumed run: nodes that joined reconnect to the same URL), or on
    a free one when that is taken or there was none."""
    port = _earlier_port(credentials.url)
    if port is not None:
        try:
            return EmbeddedNats(
                port=port,
                store_dir=str(store),
                max_payload=max_payload,
                credentials=credentials,
                memory_limit_mib=memory_limit_mib,
            ).start()
        except RuntimeError as exc:  # the port is someone else's now
            if no_space_left(exc, store):  # or the disk is full: another port would only take 15 s more to fail
                raise
            log.warning("the run's earlier port is taken: starting on a free one", port=port, error=str(exc)[:200])
    return EmbeddedNats(
        store_dir=str(store), max_payload=max_payload, credentials=credentials, memory_limit_mib=memory_limit_mib
    ).start()


def start_run_server(
    run_dir: Path, resume: bool, max_payload: int, memory_limit_mib: int = 0
) -> tuple[EmbeddedNats, RunCredentials]:
    """Start the run's embedded server (a fresh run clears `run_dir` first; `resume` keeps it and reuses its
    credentials). RunCredentialsError (a ValueError) when a resumed run's credentials file is not to be
    trusted, before anything starts; DiskFullError (an OSError) when its server cannot start for want of space."""
    if not resume:
        _clear_for_a_fresh_run(run_dir)
    credentials = run_credentials(run_dir)
    try:
        server = _start(run_dir / "nats", credentials, max_payload, memory_limit_mib)
    except RuntimeError as exc:  # a full disk shows as a server that never became ready
        if no_space_left(exc, run_dir):
            raise disk_full("the embedded nats-server's store", run_dir / "nats") from exc
        raise
    try:
        credentials = credentials.with_url(server.url)
        save_run_credentials(credentials_path(run_dir), credentials)
    except BaseException:
        server.stop()
        raise
    log.info("embedded nats-server started", nats=server.url, credentials=str(credentials_path(run_dir)))
    return server, credentials
