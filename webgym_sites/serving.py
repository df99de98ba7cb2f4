"""`ServerThread`: a standard-library HTTP server answering on a daemon thread, for the site server
and the truth listener (`webgym_rollout.tasks.sites`, `webgym_sites.truth`)."""

from __future__ import annotations

import http.server
import threading

__all__ = ["ServerThread"]


class ServerThread:
    """Serves `server` (already bound) on a daemon thread named `name` between `start` and `stop`."""

    def __init__(self, server: http.server.ThreadingHTTPServer, name: str):
        server.daemon_threads = True
        self.server, self.name = server, name
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def start(self) -> None:
        self._thread = threading.Thread(target=self.server.serve_forever, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop answering, close the socket and wait (at most 5 s) for the thread."""
        if self._thread is not None:
            self.server.shutdown()
        self.server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
