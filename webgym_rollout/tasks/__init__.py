"""Task kinds: how a task opens in a browser session and how its outcome is read.

`kind` holds the base class `TaskKind` and its registry (a kind is found from a task's
``environment``: ``"web"``, ``"miniwob:click-button"``, ``"site:shop"``) with `WebTask`, any
website; `miniwob` the MiniWoB++ kind; `sites` the site server that serves local pages on
127.0.0.1; `site_kind` the kind of the stateful sites it mounts (one fresh site session per
episode). The sites themselves, their tasks and their ground truth are the `webgym_sites`
package. Each kind registers its server-side page hooks with the browser server
(`webgym_rollout.browser.pages`), so the browser never imports this package. May import
`webgym_data`, `webgym_sites`, `webgym_rollout.errors`, `webgym_rollout.browser` (its protocol
and page-hook registry) and `webgym_rollout.trajectory`. Importing the package registers the
kinds the toolkit ships.
"""

from webgym_rollout.tasks import miniwob, site_kind
from webgym_rollout.tasks.kind import TaskKind, WebTask, kind_class, kind_names, task_kind

__all__ = ["TaskKind", "WebTask", "kind_class", "kind_names", "miniwob", "site_kind", "task_kind"]
