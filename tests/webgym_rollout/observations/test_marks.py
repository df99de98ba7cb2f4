"""`draw_marks`: one numbered outline per element, drawn where the element is (boxes scaled from
viewport CSS pixels to image pixels), readable on light and dark pages, nothing drawn elsewhere;
on synthetic images and on real screenshots of a MiniWoB++ page and a local site."""

from __future__ import annotations

import io

import numpy as np
import pytest
import pytest_asyncio
from PIL import Image

from tests.support.observed_pages import browser_server, observe, observe_miniwob
from webgym_rollout.browser.protocol import Element
from webgym_rollout.observations import draw_marks

# How far (image pixels) past its box an element's number tag may reach: a tag is at most this big.
_TAG_REACH = 24


def _png(colour: tuple[int, int, int], size: tuple[int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, format="PNG")
    return out.getvalue()


def _pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)


def _element(x: float, y: float, width: float, height: float) -> Element:
    return Element(x=x, y=y, width=width, height=height, tag="button", role="button", text="b")


def _changed(before: bytes, after: bytes) -> np.ndarray:
    a, b = _pixels(before), _pixels(after)
    assert a.shape == b.shape
    return np.abs(a - b).sum(axis=2) > 0


def _near(box: tuple[float, float, float, float], shape: tuple[int, int], reach: int) -> np.ndarray:
    """A mask of the box (image pixels) grown by `reach` to the right and below, 1 pixel elsewhere."""
    left, top, right, bottom = box
    mask = np.zeros(shape, dtype=bool)
    mask[max(0, int(top) - 1):int(bottom) + reach + 1, max(0, int(left) - 1):int(right) + reach + 1] = True
    return mask


def _check_marks(before: bytes, after: bytes, elements: list[Element], scale: tuple[float, float]) -> None:
    """Each element's box has its outline and its tag (white digits on a filled colour) at its
    top-left corner; no pixel changed away from every box."""
    changed = _changed(before, after)
    pixels = _pixels(after)
    height, width = changed.shape
    allowed = np.zeros_like(changed)
    for element in elements:
        box = (element.x * scale[0], element.y * scale[1], (element.x + element.width) * scale[0],
               (element.y + element.height) * scale[1])
        if box[2] <= 0 or box[3] <= 0 or box[0] >= width or box[1] >= height:
            continue
        allowed |= _near(box, changed.shape, _TAG_REACH)
        left, top = max(0, int(box[0])), max(0, int(box[1]))
        tag = changed[top:top + 10, left:left + 10]
        assert tag.mean() > 0.5, f"no tag at {element}"
        # What the tag changed is mostly its fill, with light digits on it.
        light = (pixels[top:top + 10, left:left + 10].min(axis=2) > 180)[tag]
        assert 0 < light.mean() < 0.6, f"the tag of {element} is not light digits on a filled colour"
    assert not (changed & ~allowed).any(), "pixels changed away from every element"


@pytest.mark.parametrize("background", [(255, 255, 255), (0, 0, 0), (31, 119, 180)])
def test_every_element_gets_a_tag_and_an_outline_on_any_background(background):
    shot = _png(background, (300, 200))
    elements = [_element(10, 10, 80, 30), _element(150, 20, 40, 40), _element(30, 120, 200, 50)]
    marked = draw_marks(shot, elements, viewport=(300, 200))
    assert Image.open(io.BytesIO(marked)).format == "PNG"
    _check_marks(shot, marked, elements, (1.0, 1.0))
    changed = _changed(shot, marked)
    for element in elements:  # the outline runs along the box's bottom edge
        bottom = int(element.y + element.height) - 1
        assert changed[bottom, int(element.x) + _TAG_REACH:int(element.x + element.width) - 2].all()
    # Each tag reads on this background: its fill differs from the page's colour.
    pixels = _pixels(marked)
    for element in elements:
        fill = pixels[int(element.y) + 1, int(element.x) + 1]
        assert np.abs(fill - np.array(background)).sum() > 60


def test_boxes_are_scaled_from_viewport_pixels_to_image_pixels():
    elements = [_element(20, 10, 60, 30), _element(100, 60, 40, 20)]
    shot = _png((255, 255, 255), (400, 200))  # a viewport of 200 x 100 shot at twice the pixels
    marked = draw_marks(shot, elements, viewport=(200, 100))
    _check_marks(shot, marked, elements, (2.0, 2.0))
    changed = _changed(shot, marked)
    assert changed[79, 70:150].all()  # the first box's bottom edge, at 2 * (10 + 30) - 1
    assert not changed[80:120, 70:150].any()  # nothing below it before the second box


def test_the_ids_follow_the_list_order_and_differ_between_neighbours():
    shot = _png((255, 255, 255), (200, 100))
    one = draw_marks(shot, [_element(10, 10, 50, 30)], viewport=(200, 100))
    two = draw_marks(shot, [_element(100, 10, 50, 30), _element(10, 10, 50, 30)], viewport=(200, 100))
    # The same box numbered 1 and numbered 2: different digits, different colours.
    assert (_pixels(one)[10:25, 10:30] != _pixels(two)[10:25, 10:30]).any()


def test_an_element_outside_the_image_draws_nothing_and_an_empty_list_changes_no_pixel():
    shot = _png((200, 200, 200), (100, 100))
    assert not _changed(shot, draw_marks(shot, [], viewport=(100, 100))).any()
    assert not _changed(shot, draw_marks(shot, [_element(150, 150, 20, 20)], viewport=(100, 100))).any()


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def server(chromium_path, sites):
    async with browser_server(chromium_path, sites.base_url) as url:
        yield url


@pytest.mark.browser
async def test_marks_on_a_miniwob_screenshot_sit_on_its_elements(server, sites):
    page = await observe_miniwob(server, sites.base_url, "login-user", seed=7)
    shot = page.screenshot
    assert len(page.info.elements) == 3
    # The MiniWoB screenshot is the task area shot at (0, 0) and scale 1, as the env passes it.
    marked = draw_marks(shot.data, page.info.elements, viewport=(shot.width, shot.height))
    _check_marks(shot.data, marked, page.info.elements, (1.0, 1.0))


@pytest.mark.browser
async def test_marks_on_a_local_site_screenshot_sit_on_its_elements(server, sites):
    page = await observe(server, f"{sites.base_url}/shop/?session=marks-test", viewport=(800, 600))
    shot = page.screenshot
    elements = page.info.elements
    assert len(elements) >= 10
    marked = draw_marks(shot.data, elements, viewport=(800, 600))
    _check_marks(shot.data, marked, elements, (shot.width / 800, shot.height / 600))
