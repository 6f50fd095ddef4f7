"""The typed config loader: unknown keys are named with the valid ones listed, wrong types are named,
`--set key.path=value` overrides are parsed as YAML, files are checked. No network."""

from __future__ import annotations

import dataclasses

import pytest

from mgrpo_actors.config import ConfigError, NodeConfig, apply_overrides, from_dict, load_config, to_dict


def _valid_keys(section_cls) -> list[str]:
    return [f.name for f in dataclasses.fields(section_cls)]


def test_defaults_load_without_a_file():
    config = load_config(NodeConfig)
    assert config == NodeConfig()
    assert config.run.id == "default" and config.nats.url.startswith("nats://")


def test_unknown_top_level_key_is_named_and_valid_keys_listed():
    with pytest.raises(ConfigError) as err:
        from_dict(NodeConfig, {"natz": {}})
    message = str(err.value)
    assert "'natz'" in message and "top level" in message
    for key in _valid_keys(NodeConfig):
        assert key in message


def test_unknown_nested_key_is_named_with_its_full_path_and_section_keys():
    with pytest.raises(ConfigError) as err:
        from_dict(NodeConfig, {"nats": {"urll": "nats://x:1"}})
    message = str(err.value)
    assert "'nats.urll'" in message and "under 'nats'" in message
    for key in _valid_keys(type(NodeConfig().nats)):
        assert key in message


@pytest.mark.parametrize(
    ("data", "key", "expected"),
    [
        ({"nats": {"connect_timeout_s": "fast"}}, "nats.connect_timeout_s", "number"),
        ({"nats": {"connect_timeout_s": True}}, "nats.connect_timeout_s", "number"),
        ({"run": {"seed": 1.5}}, "run.seed", "integer"),
        ({"run": {"seed": True}}, "run.seed", "integer"),
        ({"run": {"id": 5}}, "run.id", "string"),
        ({"log": {"json": "yes"}}, "log.json", ""),
        ({"log": {"level": "loud"}}, "log.level", "'debug'"),
        ({"nats": ["url"]}, "nats", "mapping"),
        ({"nats": "nats://x:1"}, "nats", "mapping"),
    ],
)
def test_type_errors_name_the_key(data, key, expected):
    with pytest.raises(ConfigError) as err:
        from_dict(NodeConfig, data)
    assert f"'{key}'" in str(err.value)
    assert expected in str(err.value)


def test_value_checks_of_sections_become_config_errors():
    with pytest.raises(ConfigError) as err:
        from_dict(NodeConfig, {"run": {"id": "bad.run"}})
    assert "run" in str(err.value) and "bad.run" in str(err.value)
    with pytest.raises(ConfigError) as err:
        from_dict(NodeConfig, {"tools": {"actors_per_tool": 0}})
    assert "actors_per_tool" in str(err.value)
    with pytest.raises(ConfigError):
        from_dict(NodeConfig, {"nats": {"request_timeout_s": 0}})


def test_int_is_accepted_where_a_float_is_expected():
    config = from_dict(NodeConfig, {"nats": {"connect_timeout_s": 2}})
    assert config.nats.connect_timeout_s == 2.0 and isinstance(config.nats.connect_timeout_s, float)


def test_optional_bool_accepts_null():
    assert from_dict(NodeConfig, {"log": {"json": None}}).log.json is None
    assert from_dict(NodeConfig, {"log": {"json": True}}).log.json is True


def test_to_dict_round_trips():
    config = from_dict(NodeConfig, {"run": {"id": "r-9", "seed": 4}, "nats": {"url": "nats://h:1"}})
    assert from_dict(NodeConfig, to_dict(config)) == config


# ---- overrides ------------------------------------------------------------------------------
def test_override_values_are_typed_by_yaml():
    data = apply_overrides(
        {},
        [
            "a.int=3",
            "a.float=1.5",
            "a.bool=true",
            "a.list=[1, 2]",
            "a.str=hello",
            "a.empty=",
            "a.null=null",
            "a.url=nats://h:4222",
            "a.map={x: 1}",
        ],
    )
    assert data == {
        "a": {
            "int": 3,
            "float": 1.5,
            "bool": True,
            "list": [1, 2],
            "str": "hello",
            "empty": "",
            "null": None,
            "url": "nats://h:4222",
            "map": {"x": 1},
        }
    }


def test_override_splits_on_the_first_equals_sign_only():
    assert apply_overrides({}, ["a.b=x=y"]) == {"a": {"b": "x=y"}}


def test_later_overrides_win_and_siblings_are_kept():
    data = apply_overrides(
        {"nats": {"url": "nats://a:1", "connect_timeout_s": 2.0}}, ["nats.url=nats://b:1", "nats.url=nats://c:1"]
    )
    assert data == {"nats": {"url": "nats://c:1", "connect_timeout_s": 2.0}}


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("no-equals-sign", "key.path=value"),
        ("=3", "key.path=value"),
        (" =3", "key.path=value"),
        ("a.b=[1", "not valid YAML"),
    ],
)
def test_malformed_overrides_are_rejected(override, expected):
    with pytest.raises(ConfigError) as err:
        apply_overrides({}, [override])
    assert expected in str(err.value) and repr(override) in str(err.value)


def test_override_into_a_scalar_is_rejected_naming_it():
    with pytest.raises(ConfigError) as err:
        apply_overrides({"run": {"id": "r1"}}, ["run.id.x=1"])
    assert "'run.id' is not a section" in str(err.value)


def test_unknown_key_in_an_override_is_named():
    with pytest.raises(ConfigError) as err:
        load_config(NodeConfig, overrides=["tools.actors_per_tol=3"])
    assert "'tools.actors_per_tol'" in str(err.value) and "actors_per_tool" in str(err.value)


def test_override_with_wrong_type_is_named():
    with pytest.raises(ConfigError) as err:
        load_config(NodeConfig, overrides=["tools.actors_per_tool=many"])
    assert "'tools.actors_per_tool'" in str(err.value) and "integer" in str(err.value)


# ---- files ----------------------------------------------------------------------------------
def test_file_plus_overrides(tmp_path):
    path = tmp_path / "node.yaml"
    path.write_text("run:\n  id: from-file\n  seed: 3\nnats:\n  url: nats://file:4222\n")
    config = load_config(NodeConfig, path, ["run.seed=5"])
    assert (config.run.id, config.run.seed, config.nats.url) == ("from-file", 5, "nats://file:4222")
    assert config.log == NodeConfig().log  # untouched sections keep their defaults


def test_empty_file_gives_defaults(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert load_config(NodeConfig, path) == NodeConfig()


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(NodeConfig, tmp_path / "nope.yaml")
    assert "nope.yaml" in str(err.value) and "does not exist" in str(err.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("- a\n- b\n", "mapping"), ("run: [unclosed\n", "not valid YAML"), ("just a string\n", "mapping")],
)
def test_bad_file_content_is_named(tmp_path, text, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(NodeConfig, path)
    assert "bad.yaml" in str(err.value) and expected in str(err.value)


def test_unknown_key_in_a_file_is_named(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text("log:\n  levle: debug\n")
    with pytest.raises(ConfigError) as err:
        load_config(NodeConfig, path)
    assert "'log.levle'" in str(err.value) and "level" in str(err.value)


def test_the_shipped_default_yaml_spells_out_exactly_the_defaults():
    """deploy/configs/default.yaml documents every key; it must load and equal the dataclass defaults."""
    import yaml

    from mgrpo_actors.config import NodeConfig, load_config, to_dict
    from tests.helpers import REPO

    path = REPO / "deploy" / "configs" / "default.yaml"
    assert to_dict(load_config(NodeConfig, path)) == to_dict(NodeConfig())
    written = yaml.safe_load(path.read_text())

    def keys(tree, prefix=""):
        return {f"{prefix}{k}" for k in tree} | {
            x for k, v in tree.items() if isinstance(v, dict) for x in keys(v, f"{prefix}{k}.")
        }

    defaults = to_dict(NodeConfig())
    defaults["agents"]["llm_judge"] = None  # a None section has no keys to spell out
    assert keys(written) == keys(defaults)


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"nats": {"max_message_bytes": 0}}, "nats.max_message_bytes"),
        ({"nats": {"max_message_bytes": -5}}, "nats.max_message_bytes"),
        ({"nats": {"reconnect_wait_s": -1}}, "nats.reconnect_wait_s"),
        ({"run": {"stop_timeout_s": float("nan")}}, "run.stop_timeout_s"),
        ({"nats": {"connect_timeout_s": float("inf")}}, "nats.connect_timeout_s"),
        ({"tools": {"actors_per_tool": 100_000}}, "tools.actors_per_tool"),
        ({"tools": {"web_entities": 100_000_000}}, "tools.web_entities"),
    ],
)
def test_numbers_that_would_crash_or_exhaust_the_host_are_refused_naming_key_and_range(data, key):
    """Issue 8: these passed validation and then crashed, hung or exhausted the host's PIDs."""
    with pytest.raises(ConfigError) as err:
        from_dict(NodeConfig, data)
    assert key in str(err.value) and "must be within [" in str(err.value)


def test_a_config_path_that_is_a_directory_or_not_utf8_is_named(tmp_path):
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(NodeConfig, tmp_path)
    latin1 = tmp_path / "node.yaml"
    latin1.write_bytes("run: {id: caf\xe9}\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(NodeConfig, latin1)


def test_exponent_numbers_without_a_dot_are_numbers_in_files_and_overrides(tmp_path):
    # PyYAML (YAML 1.1) reads "1e-5" as a string; a learning rate written so must still load as 1e-05.
    path = tmp_path / "node.yaml"
    path.write_text("learners:\n  main: {lr: 1e-5}\n")
    config = load_config(NodeConfig, path, ["learners.sub.lr=2E-4"])
    assert config.learners.main.lr == 1e-5 and config.learners.sub.lr == 2e-4
    with pytest.raises(ConfigError, match="must be a number"):
        load_config(NodeConfig, None, ["learners.main.lr=fast"])
    with pytest.raises(ConfigError, match="must be a number"):
        load_config(NodeConfig, None, ["learners.main.lr=1e"])
