"""The ``som`` observation: the screenshot with each interactive element's box and number drawn on it.

The WebVoyager agent's set-of-marks: every element of the step's list (`Element`, boxes in viewport
CSS pixels) gets an outline and, at its top-left corner, its 1-based id in white on a filled tag of
the outline's colour, so the number reads on any background. The colours cycle through a small
palette so that neighbouring boxes differ, skipping a colour that would blend into the page under
the tag.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from PIL import Image, ImageDraw, ImageFont

from webgym_rollout.browser.protocol import Element

__all__ = ["draw_marks"]

# Dark, saturated colours: white digits read on each, and each stands out on a light page.
_PALETTE = ((214, 39, 40), (31, 119, 180), (44, 160, 44), (148, 103, 189), (255, 127, 14),
            (23, 190, 207), (227, 119, 194), (140, 86, 75))
_LABEL_TEXT = (255, 255, 255)
_MIN_FONT_PX = 10
_MIN_CONTRAST = 120
"""Least sum of channel differences between a tag's fill and the page pixel under its corner."""


def draw_marks(screenshot: bytes, elements: Sequence[Element], *, viewport: tuple[int, int]) -> bytes:
    """The PNG of `screenshot` with element ``i`` (1-based, in list order) outlined and numbered ``i``.

    `viewport` is the size, in CSS pixels, of the frame the element boxes are given in (the
    screenshot's frame before any scaling): boxes are scaled by image width / viewport width (and
    height / height), so a screenshot taken at a lower scale is marked in the right places. A box
    reaching past the image is clipped to it; a box wholly outside is not drawn, its number neither.
    """
    image = Image.open(io.BytesIO(screenshot)).convert("RGB")
    scale_x = image.width / max(1, viewport[0])
    scale_y = image.height / max(1, viewport[1])
    page = image.copy()  # the colours under the marks, before any is drawn
    draw = ImageDraw.Draw(image)
    font_px = max(_MIN_FONT_PX, round(12 * min(scale_x, scale_y)))
    font = ImageFont.load_default(size=font_px)
    line = max(1, round(min(scale_x, scale_y)))
    for number, element in enumerate(elements, start=1):
        left = max(0.0, element.x * scale_x)
        top = max(0.0, element.y * scale_y)
        # The box's last pixel row and column (PIL's rectangles include their far corner).
        right = min(image.width - 1.0, (element.x + element.width) * scale_x - 1)
        bottom = min(image.height - 1.0, (element.y + element.height) * scale_y - 1)
        if right < left or bottom < top:
            continue
        colour = _colour(number, page.getpixel((int(left), int(top))))
        draw.rectangle((left, top, right, bottom), outline=colour, width=line)
        _draw_label(draw, font, str(number), (left, top), colour, image.size)
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()


def _colour(number: int, under: tuple[int, int, int]) -> tuple[int, int, int]:
    """Element `number`'s colour in the palette's cycle, or the next one where it would blend into
    the page colour `under` the tag."""
    for step in range(len(_PALETTE)):
        colour = _PALETTE[(number - 1 + step) % len(_PALETTE)]
        if sum(abs(a - b) for a, b in zip(colour, under, strict=True)) >= _MIN_CONTRAST:
            return colour
    return _PALETTE[(number - 1) % len(_PALETTE)]


def _draw_label(draw: ImageDraw.ImageDraw, font: ImageFont.FreeTypeFont | ImageFont.ImageFont, text: str,
                corner: tuple[float, float], colour: tuple[int, int, int], size: tuple[int, int]) -> None:
    """`text` on a filled tag whose top-left corner is `corner`, moved inside the image if needed."""
    x0, y0, x1, y1 = draw.textbbox((0, 0), text, font=font)
    pad = 1
    width, height = (x1 - x0) + 2 * pad, (y1 - y0) + 2 * pad
    left = min(max(0.0, corner[0]), max(0.0, size[0] - width))
    top = min(max(0.0, corner[1]), max(0.0, size[1] - height))
    draw.rectangle((left, top, left + width - 1, top + height - 1), fill=colour)
    draw.text((left + pad - x0, top + pad - y0), text, font=font, fill=_LABEL_TEXT)
