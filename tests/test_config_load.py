"""A config that does not load is a usage error in every tool: exit code 2 and one paragraph
naming the file or recipe and the cause, before any flag is parsed or anything written."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from contrastive_jax._cli import parse_flags
from contrastive_jax._config_file import load_error
from contrastive_jax.configs import __main__ as configs_cli
from contrastive_jax.errors import ExitCode

ROOT = Path(__file__).resolve().parents[1]

#: (file text or None for no file, the argument's tail, what the message must say).
BROKEN = {
    "syntax": ("def get_config()\n    return 1\n", "", "has a syntax error at line 1"),
    "import": ("import math\nimport no_such_module_here\n", "",
               "fails to load at line 2: ModuleNotFoundError"),
    "no_get_config": ("X = 1\n", "", "has no get_config() function"),
    "raises": ("def get_config():\n    x = 1\n    raise RuntimeError('boom')\n", "",
               "get_config() of {path} raised at line 3: RuntimeError: boom"),
    "argument": ("def get_config():\n    return {}\n", ":small",
                 "get_config('small') of {path} raised: TypeError"),
    "none": ("def get_config():\n    pass\n", "", "returned None"),
    "missing": (None, "", "the config file {path} does not exist"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_each_way_a_config_file_fails_to_load_is_named(case, tmp_path):
    text, tail, expected = BROKEN[case]
    path = tmp_path / "my_config.py"
    if text is not None:
        path.write_text(textwrap.dedent(text))
    message = load_error(f"{path}{tail}")
    assert message is not None and expected.format(path=path) in message, message
    assert message.startswith(f"--config {path}") and "\n" not in message


def test_an_unknown_recipe_name_is_named_with_the_nearest():
    message = load_error("supcon_cifar")
    assert message is not None and "'supcon_cifar' is neither a packaged recipe" in message
    assert "did you mean supcon_cifar10?" in message
    assert load_error("supcon_cifar10") is None and load_error("quickstart") is None


@pytest.mark.parametrize("override", [[], ["--config.seed=1"]], ids=["alone", "with-override"])
def test_every_tools_flag_parsing_refuses_it_with_2_before_absl(override, tmp_path, capsys):
    """pretrain, linear_eval and quickstart parse their flags with :func:`parse_flags`."""
    with pytest.raises(SystemExit) as exited:
        parse_flags(["tool", "--config", "no_such_recipe", "--workdir", str(tmp_path / "x"),
                     *override])
    assert exited.value.code == ExitCode.USAGE
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["error: --config no_such_recipe: 'no_such_recipe' is neither a packaged "
                     "recipe (python -m contrastive_jax.configs lists them) nor a config file"]
    assert not any(tmp_path.iterdir())


def test_the_configs_tool_refuses_an_unknown_name_with_2(capsys):
    assert configs_cli.main(["no_such_recipe"]) == ExitCode.USAGE
    assert capsys.readouterr().err.startswith("error: ")


def test_a_config_whose_get_config_raises_exits_2_from_the_command_line(tmp_path):
    config = tmp_path / "broken.py"
    config.write_text("def get_config():\n    raise KeyError('data')\n")
    done = subprocess.run(
        [sys.executable, "-m", "contrastive_jax.pretrain", "--config", str(config),
         "--workdir", str(tmp_path / "run"), "--config.seed=1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == ExitCode.USAGE, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: --config {config}: get_config() of {config} raised at line 2: KeyError: 'data'")
    assert not (tmp_path / "run").exists()
