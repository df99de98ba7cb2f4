"""``webgym-rl serve-policy``: serve a checkpoint as an OpenAI-compatible endpoint (uvicorn).

The command's flags come from `PolicyServerSettings` (`webgym_core.settings`: one flag per field,
its docstring as help); the checkpoint is loaded before anything binds, and a non-loopback address
without ``--token`` is refused (`webgym_rl.policy_server.app.check_bind`).
"""

from __future__ import annotations

from typing import Any

import click

from webgym_core.errors import SettingsError
from webgym_core.settings import load_settings, settings_options
from webgym_rl.errors import PolicyServerError
from webgym_rl.policy_server.app import check_bind, create_app
from webgym_rl.policy_server.settings import PolicyServerSettings

__all__ = ["serve_policy_command"]


@click.command("serve-policy", context_settings={"help_option_names": ["-h", "--help"]})
@settings_options(PolicyServerSettings)
def serve_policy_command(config: str | None, **flags: Any) -> None:
    """Serve a transformers Qwen-VL checkpoint as an OpenAI-compatible endpoint (CPU).

    Images in requests must be inline base64 data URLs; they are really fed to the model.
    POST /reload {"model": DIR} swaps in a new checkpoint without a restart; POST /weights
    (a safetensors file in /dev/shm or as the body, see push_weights) takes new weights from memory.

    \b
    Example:
      webgym-rl tiny-model out/tiny-qwen2vl
      webgym-rl serve-policy --model out/tiny-qwen2vl --port 8500
      curl -s http://127.0.0.1:8500/v1/models
      curl -s -X POST http://127.0.0.1:8500/reload -H 'content-type: application/json' \\
          -d '{"model": "out/checkpoints/iter-0001"}'
    """
    import uvicorn  # optional: uvicorn

    from webgym_rl.modeling import ModelingError  # lazy: imports transformers

    try:
        settings = load_settings(PolicyServerSettings, config, flags)
        check_bind(settings)
    except (SettingsError, PolicyServerError) as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        app = create_app(settings)
    except (ModelingError, OSError) as exc:
        raise click.ClickException(f"cannot load --model {settings.model!r}: {exc}") from exc
    click.echo(f"serving {settings.name} on http://{settings.host}:{settings.port}/v1", err=True)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning")
