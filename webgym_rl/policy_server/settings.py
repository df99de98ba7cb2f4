"""The settings of ``webgym-rl serve-policy`` (`PolicyServerSettings`): one flag per field
(`webgym_core.settings`), its docstring as the flag's help."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from webgym_core.settings import flat
from webgym_rl.pixels import ImageSettings
from webgym_rollout.browser.callers import CallerCheck

__all__ = ["PolicyServerSettings"]


@dataclass(frozen=True)
class PolicyServerSettings:
    """Settings of ``webgym-rl serve-policy``."""

    model: str = ""
    """Checkpoint to serve: a local folder or a Hub model id (Qwen2-VL, Qwen2.5-VL or Qwen3-VL)."""
    host: str = "127.0.0.1"
    """Address to bind. Anything but a loopback address requires --token."""
    port: int = 8500
    """TCP port to bind; 0 picks a free one."""
    token: str | None = field(default=None, metadata={"env": "WEBGYM_POLICY_TOKEN"})
    """Bearer token every endpoint but /health requires (clients send Authorization: Bearer
    <token>); none means no authentication."""
    served_model_name: str | None = None
    """Name clients pass as ``model`` (default: --model as given). Unchanged by /reload."""
    revision: str | None = None
    """Hub revision of --model (ignored for local folders)."""
    device: str = "cpu"
    """Torch device the model runs on."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Weights dtype; auto keeps the checkpoint's."""
    max_new_tokens: int = 512
    """Upper bound and default for a request's max_tokens."""
    images: ImageSettings = flat(ImageSettings)
    policy_version: int = 0
    """Version of --model (replies say ``system_fingerprint: v<N>``); /reload sets the next ones."""
    server_names: tuple[str, ...] = ()
    """More names clients reach the server by (the Host header): ``name`` (any port) or
    ``name:port``. Without them it answers only to its bind address and port (on loopback also
    127.0.0.1, localhost and [::1]; bound to 0.0.0.0 or ::, any IP address and localhost); any other
    Host gets 421, so that no web page reaches it through DNS rebinding."""
    allowed_origins: tuple[str, ...] = ()
    """Web origins (``https://dashboard.example``) whose pages may call the server; any other request
    carrying an Origin header (or Sec-Fetch-Site: cross-site / same-site) gets 403."""

    def caller_check(self) -> CallerCheck:
        """A new `CallerCheck` for these settings (its port is set once the server is bound)."""
        return CallerCheck(self.host, self.port, server_names=self.server_names,
                           allowed_origins=self.allowed_origins)

    def __post_init__(self) -> None:
        if self.policy_version < 0:
            raise ValueError(f"policy_version: must be >= 0, got {self.policy_version}")
        if not self.model:
            raise ValueError("model: a checkpoint folder or Hub model id is required")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port: must be in 0..65535, got {self.port}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens: must be >= 1, got {self.max_new_tokens}")
        self.caller_check()  # a ValueError naming server_names / allowed_origins

    @property
    def name(self) -> str:
        """The model name served on /v1/models."""
        return self.served_model_name or self.model
