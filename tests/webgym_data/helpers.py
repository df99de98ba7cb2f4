"""Helpers shared by the webgym_data tests."""

from __future__ import annotations

from dataclasses import fields

from webgym_core.endpoint import Endpoint
from webgym_data.llm import LLMSettings

_ENDPOINT_FIELDS = {f.name for f in fields(Endpoint)}


def llm_settings(base_url: str, **values) -> LLMSettings:
    """`LLMSettings` from one flat set of keyword arguments (the `Endpoint` ones go to its endpoint).

    Without a ``cache_dir`` the reply cache is off, so that a test never reads or writes the user's
    cache (``$XDG_CACHE_HOME/webgym/llm``)."""
    endpoint = {k: values.pop(k) for k in list(values) if k in _ENDPOINT_FIELDS}
    values.setdefault("cache", "cache_dir" in values)
    return LLMSettings(endpoint=Endpoint(base_url=base_url, **endpoint), **values)
