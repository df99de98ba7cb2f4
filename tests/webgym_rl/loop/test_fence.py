"""webgym_rl.loop.fence: no policy request overlaps a publish where the endpoint does not stamp its
replies, so the version a request reads when it starts is the one that answers it."""

from __future__ import annotations

import asyncio
import threading
import time

from webgym_rl.loop.fence import VersionFence


def test_a_publish_waits_for_running_requests_and_holds_new_ones():
    fence = VersionFence()
    version = {"serving": 1}
    answered: list[tuple[str, int, int]] = []
    publishing = threading.Event()

    async def request(name: str, work_s: float) -> None:
        async with fence.request():
            asked = version["serving"]
            await asyncio.sleep(work_s)  # the endpoint works; a publish may be waiting meanwhile
            answered.append((name, asked, version["serving"]))

    def publish() -> None:
        with fence.publish():
            publishing.set()
            time.sleep(0.2)  # new weights go in
            version["serving"] = 2

    async def main() -> None:
        early = asyncio.create_task(request("early", 0.3))
        await asyncio.sleep(0.05)
        thread = threading.Thread(target=publish)
        thread.start()
        await asyncio.to_thread(publishing.wait)  # the publish started: after the early request ended
        late = asyncio.create_task(request("late", 0.0))
        await asyncio.gather(early, late)
        thread.join()

    asyncio.run(main())
    # Each request was answered by the version it read when it started: none saw the weights change.
    assert answered == [("early", 1, 1), ("late", 2, 2)]
    assert fence.publishes == 1


def test_a_cancelled_request_never_holds_the_fence():
    fence = VersionFence()

    async def main() -> None:
        with fence.publish():
            waiting = asyncio.create_task(_enter_and_hold(fence))
            await asyncio.sleep(0.05)
            waiting.cancel()  # cancelled while it waits for the publish to end
            await asyncio.gather(waiting, return_exceptions=True)
        done = threading.Event()
        thread = threading.Thread(target=lambda: (fence.publish().__enter__(), done.set()))
        thread.start()
        thread.join(timeout=5)
        assert done.is_set(), "a cancelled request left the fence held"

    asyncio.run(main())


async def _enter_and_hold(fence: VersionFence) -> None:
    async with fence.request():
        await asyncio.sleep(10)


def test_an_endpoint_that_stamps_its_replies_is_never_fenced():
    fence = VersionFence(enabled=False)

    async def main() -> None:
        with fence.publish():  # does not wait for the request below, nor does it hold it
            async with fence.request():
                pass

    asyncio.run(asyncio.wait_for(main(), timeout=5))
