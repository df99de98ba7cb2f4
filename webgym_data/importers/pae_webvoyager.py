"""PAE-WebVoyager (amazon-science/PAE): 128,499 proposed tasks on 13 WebVoyager sites.

Same JSONL rows as WebVoyager (``web_name, id, ques, web``), without reference answers. The data
is on the Hub only (``yifeizhou/pae-data``, non-commercial licence); put a downloaded ``*.jsonl`` in
``seeds/pae_webvoyager/`` to import it offline.
"""

from __future__ import annotations

from webgym_data.importers.webvoyager import WebVoyagerImporter

__all__ = ["PaeWebVoyagerImporter"]


class PaeWebVoyagerImporter(WebVoyagerImporter):
    name = "pae_webvoyager"
    benchmark_name = "pae-webvoyager"
    hub_id = "yifeizhou/pae-data"
    license_id = "cc-by-nc-4.0"
    license_note = "non-commercial use only (PAE's licence)"
    default_paths = ("pae_webvoyager",)
    folder_files = ("*.jsonl",)
