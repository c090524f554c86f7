"""Config loading: defaults, YAML and --set layering, and every error path's one-line message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dllm_voice.app.config import DEFAULT_CONFIG_PATH, Config, ConfigError, load_config, render_yaml

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_defaults_match_code() -> None:
    assert load_config() == Config()  # the project's config.yaml restates the defaults


def test_config_yaml_restates_every_default() -> None:
    assert DEFAULT_CONFIG_PATH.read_text() == render_yaml(Config()), (
        "config.yaml is stale: regenerate with `python main.py config > config.yaml`"
    )


def test_yaml_file_then_overrides(tmp_path: Path) -> None:
    path = write(tmp_path, "lm:\n  temperature: 0.7\n  decoder: hybrid\nserver:\n  port: 9000\n")
    cfg = load_config(path, ["lm.temperature=0.2", "server.host=0.0.0.0"])
    assert cfg.lm.temperature == 0.2  # --set wins over the file
    assert cfg.lm.decoder == "hybrid"
    assert cfg.server.port == 9000 and cfg.server.host == "0.0.0.0"
    assert cfg.vad == Config().vad  # untouched sections keep their defaults


def test_int_accepted_for_float_and_str(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "lm:\n  temperature: 1\naudio:\n  input_device: 2\n"))
    assert cfg.lm.temperature == 1.0 and isinstance(cfg.lm.temperature, float)
    assert cfg.audio.input_device == "2"


def test_off_is_the_word_for_a_string_setting() -> None:
    # YAML reads an unquoted off as false: `--set echo.mode=off` must still mean "off".
    assert load_config(None, ["echo.mode=off"]).echo.mode == "off"
    with pytest.raises(ConfigError, match="echo.mode"):
        load_config(None, ["echo.mode=on"])  # not one of its choices


def test_empty_file_and_empty_section(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, "")) == Config()
    assert load_config(write(tmp_path, "lm:\n")) == Config()


def test_turn_taking_sections_and_no_old_names() -> None:
    cfg = load_config(None, ["end_of_turn.complete_ms=300", "barge_in.enabled=false"])
    assert cfg.end_of_turn.complete_ms == 300 and not cfg.barge_in.enabled
    with pytest.raises(ConfigError, match="unknown key 'conversation.end_complete_ms'"):
        load_config(None, ["conversation.end_complete_ms=300"])


def test_list_field(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "conversation:\n  backchannels: [mm, uh huh]\n"))
    assert cfg.conversation.backchannels == ("mm", "uh huh")


@pytest.mark.parametrize(
    ("yaml_text", "overrides", "expected"),
    [
        (
            "lm:\n  temprature: 0.5\n",
            [],
            "unknown key 'lm.temprature' (did you mean 'temperature'?",
        ),
        ("llm:\n  decoder: ar\n", [], "unknown section 'llm' (did you mean 'lm'?"),
        (
            "lm:\n  max_new_tokens: lots\n",
            [],
            "lm.max_new_tokens = 'lots' has the wrong type (expected int)",
        ),
        ("lm:\n  max_new_tokens: 1.5\n", [], "lm.max_new_tokens = 1.5 has the wrong type"),
        ("server:\n  port: true\n", [], "server.port = True has the wrong type (expected int)"),
        ("lm:\n  temperature: -1\n", [], "lm.temperature = -1.0 is out of range (allowed: 0.0 .. "),
        (
            "server:\n  port: 70000\n",
            [],
            "server.port = 70000 is out of range (allowed: 0 .. 65535)",
        ),
        (
            "lm:\n  decoder: magic\n",
            [],
            "lm.decoder = 'magic' is not allowed (choose one of: 'ar', ",
        ),
        ("", ["lm.decoder=magic"], "lm.decoder = 'magic' is not allowed"),
        ("", ["lm.threads=-2"], "lm.threads = -2 is out of range"),
        ("", ["lmdecoder=ar"], "--set 'lmdecoder=ar' is malformed (expected section.key=value)"),
        ("", ["lm.decoder"], "is malformed"),
        ("", ["nope.x=1"], "unknown section 'nope'"),
        (
            "conversation:\n  backchannels: mm\n",
            [],
            "conversation.backchannels = 'mm' has the wrong type (expected list of str)",
        ),
        ("- a\n- b\n", [], "must be a mapping of sections"),
        ("lm: 3\n", [], "section 'lm' must be a mapping of key: value"),
        ("lm: [\n", [], "is not valid YAML at line"),
    ],
)
def test_errors_name_key_value_and_allowed(
    tmp_path: Path, yaml_text: str, overrides: list[str], expected: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, yaml_text), overrides)
    message = str(err.value)
    assert expected in message
    assert "\n" not in message and message.startswith("config: ")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found: .*nope.yaml"):
        load_config(tmp_path / "nope.yaml")


def run_main(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "main.py"), *args], capture_output=True, text=True, timeout=60
    )


def test_cli_bad_config_is_one_line_without_traceback() -> None:
    result = run_main("--set", "lm.temperature=hot", "config")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: config: lm.temperature = 'hot' has the wrong type (expected float)"
    ]


def test_cli_set_after_subcommand_and_config_dump() -> None:
    result = run_main("config", "--set", "lm.decoder=hybrid")
    assert result.returncode == 0, result.stderr
    assert "  decoder: hybrid" in result.stdout


def test_cli_help_lists_subcommands() -> None:
    result = run_main("--help")
    assert result.returncode == 0
    for name in ("chat", "serve", "ask", "run", "trace", "devices", "config"):
        assert name in result.stdout


@pytest.mark.parametrize("raw", [".nan", ".inf", "-.inf", "1.0e+999"])
def test_a_float_setting_must_be_finite(raw: str) -> None:
    # NaN passes every range check, and a client cannot parse it back.
    with pytest.raises(ConfigError, match="lm.threshold .* not a finite number"):
        load_config(path=None, overrides=[f"lm.threshold={raw}"])
