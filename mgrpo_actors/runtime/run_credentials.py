"""The per-run NATS user of an embedded server: `<run.dir>/<run.id>/nats-credentials.json`.

`mgrpo run` and `mgrpo-node --role all` (without --nats) start their nats-server with one user whose
name and password are random per run, so another local process cannot connect, read gold answers or
publish forged batches without reading this file first. The file is mode 0600 and owned by the user
running the node; the server's own config gets only a bcrypt hash. It also records the server's URL
(`mgrpo tap --run-dir`, `mgrpo ping --run-dir`, a node joining with `--nats` that URL connect with it).

A resumed run (`--resume`) reuses the file, so nodes that joined keep their credentials; a file with
permissions looser than 0600, another owner, or content that is not the JSON below is refused
(RunCredentialsError, a ValueError: exit 2). What it does not protect against: root, and any process
of the same OS user, can read a 0600 file.

    {"user": "...", "password": "...", "url": "nats://127.0.0.1:PORT"}
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import urllib.parse
from dataclasses import dataclass, replace
from pathlib import Path

import bcrypt

from mgrpo_actors.runtime.disk import atomic_write_text
from mgrpo_actors.runtime.security import ConnectSecurity

__all__ = [
    "CREDENTIALS_FILE",
    "RunCredentials",
    "RunCredentialsError",
    "credentials_path",
    "load_run_credentials",
    "matching_run_credentials",
    "new_run_credentials",
    "run_credentials",
    "same_servers",
    "save_run_credentials",
]

CREDENTIALS_FILE = "nats-credentials.json"


class RunCredentialsError(ValueError):
    """The run's credentials file cannot be trusted or read (a config error: exit 2)."""


@dataclass(frozen=True)
class RunCredentials:
    """One run's NATS user on its embedded server, and where that server listens ("" before it started)."""

    user: str
    password: str
    url: str = ""

    def __repr__(self) -> str:  # never print the password
        return f"RunCredentials(user={self.user!r}, password='***', url={self.url!r})"

    def with_url(self, url: str) -> RunCredentials:
        return replace(self, url=url)

    def security(self) -> ConnectSecurity:
        """What a client connects with (no TLS: the embedded server listens on loopback only)."""
        return ConnectSecurity(user=self.user, password=self.password)

    def server_authorization(self) -> str:
        """The nats-server `authorization` block admitting this user alone; the password only as a bcrypt
        hash, so the server's config file never holds it."""
        # Cost 10 as `mgrpo deploy` renders (0.2 s here, once per server start and per connection).
        hashed = bcrypt.hashpw(self.password.encode(), bcrypt.gensalt(rounds=10)).decode()
        return f"authorization {{ users: [ {{ user: {json.dumps(self.user)}, password: {json.dumps(hashed)} }} ] }}\n"


def credentials_path(run_dir: Path | str) -> Path:
    """Where the run in `run_dir` (<run.dir>/<run.id>) keeps its credentials."""
    return Path(run_dir) / CREDENTIALS_FILE


def new_run_credentials() -> RunCredentials:
    """A fresh random user and password (URL-safe, so they need no quoting anywhere)."""
    return RunCredentials(user=f"run-{secrets.token_urlsafe(9)}", password=secrets.token_urlsafe(32))


def save_run_credentials(path: Path, credentials: RunCredentials) -> None:
    """Write `credentials` to `path` as mode 0600 from the first byte (never readable by others, not even
    for a moment), replacing the old file in one rename so a reader sees the old or the new one whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.parent.stat().st_uid == os.getuid():
        os.chmod(path.parent, 0o700)  # the run's store, checkpoints and server log are nobody else's either
    document = {"user": credentials.user, "password": credentials.password, "url": credentials.url}
    atomic_write_text(path, json.dumps(document) + "\n", "the run's credentials", mode=0o600)


def load_run_credentials(path: Path) -> RunCredentials:
    """The credentials in `path`; RunCredentialsError (one line, naming the file and the fix) when it is
    missing, a link, looser than 0600, owned by someone else or malformed."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise RunCredentialsError(f"{path} does not exist (the run's embedded server has not started)") from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISREG(info.st_mode):
        raise RunCredentialsError(f"{path} is not a regular file: refusing run credentials that are a link")
    if info.st_uid != os.getuid():
        raise RunCredentialsError(f"{path} is owned by uid {info.st_uid}, not this user ({os.getuid()}): refusing it")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise RunCredentialsError(
            f"{path} has mode {mode:04o}, looser than 0600 (others may have read the run's password): "
            f"chmod 600 it if nobody did, or delete it and start the run afresh"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunCredentialsError(f"{path} is malformed ({exc}): delete it and start the run afresh") from None
    fields = ("user", "password", "url")
    if (
        not isinstance(data, dict)
        or not all(isinstance(data.get(key, ""), str) for key in fields)
        or not data.get("user")
        or not data.get("password")
    ):
        raise RunCredentialsError(
            f"{path} is malformed (want a JSON object with string user, password and url): "
            "delete it and start the run afresh"
        )
    return RunCredentials(user=data["user"], password=data["password"], url=data.get("url", ""))


def run_credentials(run_dir: Path) -> RunCredentials:
    """The run's credentials: those of its file when there is one (a resumed run), checked, else new ones
    saved there."""
    path = credentials_path(run_dir)
    if os.path.lexists(path):
        return load_run_credentials(path)
    credentials = new_run_credentials()
    save_run_credentials(path, credentials)
    return credentials


def _servers(url: str) -> set[tuple[str, int]]:
    found = set()
    for server in url.split(","):
        if not server.strip():
            continue
        parsed = urllib.parse.urlparse(server.strip() if "://" in server else f"nats://{server.strip()}")
        try:
            host, port = (parsed.hostname or "127.0.0.1").lower(), parsed.port or 4222
        except ValueError:
            continue
        found.add(("127.0.0.1" if host == "localhost" else host, port))
    return found


def same_servers(url: str, other: str) -> bool:
    """Whether two NATS URLs (comma-separated lists) name the same servers (`localhost` is 127.0.0.1)."""
    return bool(_servers(url)) and _servers(url) == _servers(other)


def matching_run_credentials(run_dir: Path, url: str) -> RunCredentials | None:
    """For a node joining a run on its embedded server: the run's credentials when `run_dir` has them and
    they are those of the server at `url` (else None: they are never sent to another server)."""
    path = credentials_path(run_dir)
    if not os.path.lexists(path):
        return None
    try:  # whose server first: a file this node would never use does not stop it, however it is kept
        recorded = json.loads(path.read_text(encoding="utf-8")).get("url", "")
    except (OSError, ValueError, AttributeError):
        recorded = None
    if isinstance(recorded, str) and not same_servers(recorded, url):
        return None
    credentials = load_run_credentials(path)  # checked (mode, owner, link, content) before it is used
    return credentials if same_servers(credentials.url, url) else None
