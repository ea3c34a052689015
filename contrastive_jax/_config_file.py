"""The check that ``--config`` names a config that loads, for every command-line tool.

``ml_collections``' config flag reports a config that does not load as a traceback, or not
at all until an override touches it. :func:`load_error` loads the file as the flag will
(the module, then ``get_config(arg)``) and says in one paragraph why it does not: a name
that is neither a packaged recipe nor a file, a file that does not exist, a syntax error
(with its line), an import that fails, no ``get_config``, a ``get_config`` that raises (with
the line that raised) or returns None. :func:`contrastive_jax._cli.parse_flags` reports it
as a usage error (exit code 2) before absl parses the flags.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import sys
import traceback

from contrastive_jax import configs


def _where(err: BaseException, path: str) -> str:
    """`` at line N`` of the innermost frame of ``err``'s traceback in the file ``path``."""
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if os.path.abspath(f.filename) == os.path.abspath(path)]
    return f" at line {frames[-1].lineno}" if frames else ""


def _cause(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


def load_error(value: str) -> str | None:
    """Why ``--config=value`` (a packaged recipe's name or a path, with an optional ``:arg``)
    does not load, in one paragraph; None when it loads.

    Examples:
      >>> load_error("quickstart") is None
      True
      >>> load_error("quikstart")
      "--config quikstart: 'quikstart' is neither a packaged recipe (python -m contrastive_jax.configs lists them; did you mean quickstart?) nor a config file"
    """
    name, colon, arg = value.partition(":")
    path = configs.path(name) if name in configs.NAMES else name
    if not os.path.isfile(path):
        if os.sep in name or name.endswith(".py"):
            return f"--config {value}: the config file {name} does not exist"
        near = difflib.get_close_matches(name, configs.NAMES, n=1)
        hint = f"; did you mean {near[0]}?" if near else ""
        return (f"--config {value}: {name!r} is neither a packaged recipe (python -m "
                f"contrastive_jax.configs lists them{hint}) nor a config file")
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
        code = compile(source, path, "exec")
    except SyntaxError as err:
        return (f"--config {value}: the config file {path} has a syntax error at line "
                f"{err.lineno}: {err.msg}")
    except (OSError, UnicodeDecodeError) as err:
        return f"--config {value}: the config file {path} cannot be read ({err})"
    spec = importlib.util.spec_from_file_location("contrastive_jax_config_check", path)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as an import has it (a dataclass in the file needs it)
    try:
        exec(code, module.__dict__)  # noqa: S102 - the user's config file, as the flag runs it
    except Exception as err:  # noqa: BLE001 - any failure of the file is the user's to read
        return (f"--config {value}: the config file {path} fails to load{_where(err, path)}: "
                f"{_cause(err)}")
    finally:
        del sys.modules[spec.name]
    get_config = getattr(module, "get_config", None)
    if not callable(get_config):
        return (f"--config {value}: the config file {path} has no get_config() function "
                "returning the config")
    try:
        config = get_config(*([arg] if colon else []))
    except Exception as err:  # noqa: BLE001 - as above
        call = f"get_config({arg!r})" if colon else "get_config()"
        return f"--config {value}: {call} of {path} raised{_where(err, path)}: {_cause(err)}"
    if config is None:
        return f"--config {value}: get_config() of {path} returned None (a missing return?)"
    return None
