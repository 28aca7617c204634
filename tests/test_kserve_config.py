"""``[server.kserve]`` and ``[offload]`` are checked at load, each problem naming its key."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.configs import digits_config

from edged.config.file import load_config
from edged.config.kserve import missing_extra
from edged.errors import ConfigError

needs_extra = pytest.mark.skipif(missing_extra() is not None,
                                 reason=f"the kserve extra is not installed ({missing_extra()})")


def problems(tmp: Path, server: str = "", extra: str = "") -> list[str]:
    cfg = digits_config(tmp, server=server, extra_models=extra)
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    return e.value.problems


@needs_extra
def test_loopback_addresses_load(tmp_path: Path) -> None:
    cfg = load_config(digits_config(tmp_path, server='[server.kserve]\ngrpc = "127.0.0.1:8001"\n'
                                    'http = "[::1]:8000"\n'))
    assert cfg.server.kserve.grpc == "127.0.0.1:8001" and cfg.server.kserve.http == "[::1]:8000"
    assert not load_config(digits_config(tmp_path)).server.kserve.enabled


def test_a_remote_address_needs_allow_remote(tmp_path: Path) -> None:
    p = problems(tmp_path, '[server.kserve]\ngrpc = "0.0.0.0:8001"\n')
    assert any("server.kserve.grpc" in x and "allow_remote" in x for x in p), p


@needs_extra
def test_allow_remote_lets_other_hosts_in(tmp_path: Path) -> None:
    cfg = load_config(digits_config(tmp_path, server='[server.kserve]\nhttp = "0.0.0.0:8000"\n'
                                    "allow_remote = true\n"))
    assert cfg.server.kserve.http == "0.0.0.0:8000"


@pytest.mark.parametrize("value", ["8001", "127.0.0.1:", "127.0.0.1:99999", ":8001"])
def test_a_malformed_address_names_the_key(tmp_path: Path, value: str) -> None:
    p = problems(tmp_path, f'[server.kserve]\nhttp = "{value}"\n')
    assert any("server.kserve.http" in x and "HOST:PORT" in x for x in p), p


def test_unknown_keys_and_a_shared_address_are_problems(tmp_path: Path) -> None:
    p = problems(tmp_path, '[server.kserve]\ngrcp = "127.0.0.1:1"\n')
    assert any("server.kserve.grcp" in x and "did you mean 'grpc'" in x for x in p), p
    p = problems(tmp_path, '[server.kserve]\ngrpc = "127.0.0.1:1"\nhttp = "127.0.0.1:1"\n')
    assert any("server.kserve.http" in x and "also the grpc address" in x for x in p), p


def test_offload_names_a_model_and_variant_it_has(tmp_path: Path) -> None:
    p = problems(tmp_path, extra='[offload]\nurl = "grpc://127.0.0.1:8001"\n'
                 '[[offload.models]]\nmodel = "nope"\n'
                 '[[offload.models]]\nmodel = "digits"\nvariant = "cnn-fp64"\n')
    assert any("offload.models[0].model" in x and "no model named 'nope'" in x for x in p), p
    assert any("offload.models[1].variant" in x and "cnn-fp32" in x for x in p), p
    p = problems(tmp_path, extra='[offload]\nurl = "tcp://127.0.0.1:8001"\n'
                 '[[offload.models]]\nmodel = "digits"\n')
    assert any("offload.url" in x and "grpc://HOST:PORT" in x for x in p), p
    p = problems(tmp_path, extra='[offload]\nurl = "grpc://127.0.0.1:8001"\n')
    assert any("offload.models" in x and "missing" in x for x in p), p


def test_a_level_offloads_only_mapped_models(tmp_path: Path) -> None:
    levels = '[governor]\n[[governor.levels]]\nname = "hot"\nenter_c = 80.0\noffload = ["digits"]\n'
    cfg = digits_config(tmp_path, governor=levels)
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    assert any("governor.levels" in x and "offload 'digits'" in x
               for x in e.value.problems), e.value.problems


def test_the_grpc_server_is_chosen_by_name(tmp_path: Path) -> None:
    cfg = load_config(digits_config(tmp_path, server='[server.kserve]\ngrpc = "127.0.0.1:1"\n'))
    assert cfg.server.kserve.grpc_server == "threads"
    p = problems(tmp_path, '[server.kserve]\ngrpc = "127.0.0.1:1"\ngrpc_server = "aio"\n')
    assert any("server.kserve.grpc_server" in x and "'threads', 'loop'" in x for x in p), p
