"""Where `mgrpo deploy nats-config`'s servers listen (servers[].listen_host): every interface by default (as
before), or the one address given, for the client port and the cluster's routes alike. No bcrypt, no network."""

from __future__ import annotations

import pytest

from mgrpo_actors.config import ConfigError, from_dict
from mgrpo_actors.deploy.description import DeploymentDescription, ServerAddress, TlsSettings
from mgrpo_actors.deploy.server_config import _server_config


def _listens(description: DeploymentDescription, index: int = 0) -> list[str]:
    conf = _server_config(description, index, "", None)
    return [line.strip() for line in conf.splitlines() if line.strip().startswith(("listen:", "http:"))]


def test_by_default_a_server_listens_on_every_interface_and_monitors_on_loopback():
    assert _listens(DeploymentDescription(tls=TlsSettings(enabled=False))) == [
        'listen: "0.0.0.0:4222"',
        'http: "127.0.0.1:8222"',
    ]


def test_a_listen_host_binds_the_client_port_and_the_routes_to_that_address():
    servers = [ServerAddress(name=f"n{i}", host=f"10.0.0.{i}", listen_host=f"10.0.0.{i}") for i in (1, 2, 3)]
    description = DeploymentDescription(servers=servers, tls=TlsSettings(enabled=False))
    assert _listens(description, 1) == ['listen: "10.0.0.2:4222"', 'http: "127.0.0.1:8222"', 'listen: "10.0.0.2:6222"']


def test_an_ipv6_listen_host_is_bracketed_and_a_name_is_taken_as_it_is():
    assert ServerAddress(listen_host="::1").listen(4222) == "[::1]:4222"
    assert ServerAddress(listen_host="nats-1.internal").listen(4222) == "nats-1.internal:4222"


@pytest.mark.parametrize("host", ["", "0.0.0.0:4222", "two words", "a..b", "-x;y"])
def test_a_listen_host_that_is_no_address_is_refused_naming_the_key(host):
    with pytest.raises(ValueError, match=r"servers\[nats-1\]\.listen_host"):
        ServerAddress(listen_host=host)


def test_the_description_file_takes_listen_host_per_server():
    description = from_dict(DeploymentDescription, {"servers": [{"name": "a", "listen_host": "192.168.1.5"}]})
    assert description.servers[0].listen_host == "192.168.1.5"
    with pytest.raises(ConfigError, match="listen_host"):
        from_dict(DeploymentDescription, {"servers": [{"name": "a", "listen_host": "not an address"}]})
