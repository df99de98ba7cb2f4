"""SiteRouter: a site that raises answers a 500 page and the session serves on; a redirect goes only
to a path of this server; the truth of a session is its last finished request's snapshot, readable
while a request of the session holds its lock."""

from __future__ import annotations

import threading
from typing import Any

from webgym_sites.base import PageRequest, PageResponse, Site
from webgym_sites.router import SiteRouter
from webgym_sites.state import Session, new_session_id


class _Notes(Site):
    """A site, mounted where the shop is, that keeps the notes a session posts; ``/boom`` raises,
    ``/slow`` waits for `release`, ``/go?to=`` redirects to whatever it is given. Its facts are
    none: the pages the session visited stand for them."""

    name = "shop"

    def __init__(self) -> None:
        self.arrived, self.release = threading.Event(), threading.Event()

    def new_state(self) -> list[str]:
        return []

    def facts(self, session: Session) -> Any:
        return None

    def handle(self, request: PageRequest) -> PageResponse:
        notes = request.session.site_state(self.name, self.new_state)
        if request.path == "/add":
            notes.append(request.arg("text"))
        elif request.path == "/boom":
            notes.append("half done")
            raise OverflowError("cannot convert float infinity to integer")
        elif request.path == "/slow":
            notes.append("slow")
            self.arrived.set()
            self.release.wait(timeout=60)
        elif request.path == "/go":
            return PageResponse(location=request.arg("to"))
        return PageResponse(f"<p>{len(notes)} notes</p>")


def test_a_site_that_raises_answers_500_and_its_session_serves_on(caplog):
    router = SiteRouter([_Notes()])
    session = new_session_id()
    failed = router.serve("GET", f"/shop/boom?session={session}")
    assert failed.status == 500 and b"Something went wrong" in failed.body
    assert ("Set-Cookie", f"webgym_session={session}; Path=/; HttpOnly; SameSite=Lax") in failed.headers
    assert "OverflowError" in caplog.text and "the shop site failed (answered 500)" in caplog.text
    again = router.serve("GET", f"/shop/?session={session}")
    assert again.status == 200 and b"1 notes" in again.body  # what the failed request did stays
    other = router.serve("GET", f"/shop/?session={new_session_id()}")
    assert other.status == 200 and b"0 notes" in other.body


def test_a_redirect_goes_only_to_a_path_of_this_server():
    router = SiteRouter([_Notes()])
    session = new_session_id()

    def location(target: str) -> tuple[int, dict[str, str]]:
        answer = router.serve("GET", f"/shop/go?session={session}&to={target}")
        return answer.status, dict(answer.headers)

    status, headers = location("/shop/%C3%A9t%C3%A9?x=%E6%9D%B1")  # é, 東: percent-encoded in the header
    assert status == 303 and headers["Location"] == "/shop/%C3%A9t%C3%A9?x=%E6%9D%B1"
    for target in ("//evil.test/", "https://evil.test/", "/a%0D%0ASet-Cookie:%20x=1", "/%5Cevil.test"):
        status, headers = location(target)
        assert status == 500 and "Location" not in headers and "Set-Cookie: x" not in str(headers), target


def test_the_truth_is_a_snapshot_readable_while_a_request_of_the_session_runs():
    notes = _Notes()
    router = SiteRouter([notes])
    session = new_session_id()
    assert router.facts(session).seen is False
    router.serve("GET", f"/shop/add?session={session}&text=first")
    slow = threading.Thread(target=router.serve, args=("GET", f"/shop/slow?session={session}"))
    slow.start()
    try:
        assert notes.arrived.wait(timeout=60)
        read: list[Any] = []
        reader = threading.Thread(target=lambda: read.append(router.facts(session)))
        reader.start()
        reader.join(timeout=30)  # waiting on the request's lock would hang here until the release
        assert [facts.visited for facts in read] == [("/shop/add?text=first",)]  # not the request running
    finally:
        notes.release.set()
        slow.join(timeout=60)
    assert router.facts(session).visited == ("/shop/add?text=first", "/shop/slow")
