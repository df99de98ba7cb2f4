"""The Larkspur Library: a site of your own as a WebGym environment (docs/guides/your-site.md).

`site` (the pages and the truth listener), `tasks` (generated task rows), `kind` (the ``library``
task kind), `judge` (reward from the truth), `policy` (a scripted policy), `play` (all of it end to
end: ``python -m examples.my_site.play --out out/library``).
"""
