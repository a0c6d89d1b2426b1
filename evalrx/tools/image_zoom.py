"""`image_zoom`: crop a box of the case image (fractions 0-1) and upscale it."""

from __future__ import annotations

from typing import Any

from evalrx.core.tool import Tool, ToolResult

MAX_SCALE = 8
MAX_OUTPUT_PIXELS = 4096 * 4096

SCHEMA = {
    "type": "object",
    "properties": {
        "x0": {"type": "number", "description": "left edge, 0-1"},
        "y0": {"type": "number", "description": "top edge, 0-1"},
        "x1": {"type": "number", "description": "right edge, 0-1"},
        "y1": {"type": "number", "description": "bottom edge, 0-1"},
        "scale": {"type": "number", "description": "upscale factor, default 2"},
    },
    "required": ["x0", "y0", "x1", "y1"],
}


def _open_image(image: Any) -> Any:
    from PIL import Image

    if isinstance(image, Image.Image):
        return image
    if isinstance(image, (bytes, bytearray)):
        import io

        return Image.open(io.BytesIO(image))
    return Image.open(image)


def zoom(image: Any, x0: Any, y0: Any, x1: Any, y1: Any, scale: Any = 2) -> ToolResult:
    """Crop `image` to the fractional box and upscale by `scale`; errors come back as text."""
    if image is None:
        return ToolResult(text="error: this case has no image to zoom into")
    try:
        box = [float(v) for v in (x0, y0, x1, y1)]
        factor = float(scale)
    except (TypeError, ValueError):
        return ToolResult(text="error: x0, y0, x1, y1 and scale must be numbers")
    if any(not 0.0 <= v <= 1.0 for v in box):
        return ToolResult(text=f"error: box {box} must use fractions between 0 and 1")
    if box[2] <= box[0] or box[3] <= box[1]:
        return ToolResult(text=f"error: empty box {box}; need x0 < x1 and y0 < y1")
    if not 1.0 <= factor <= MAX_SCALE:
        return ToolResult(text=f"error: scale {factor} must be between 1 and {MAX_SCALE}")
    try:
        img = _open_image(image)
        img.load()
    except Exception as exc:  # unreadable file or bytes: report it to the model
        return ToolResult(text=f"error: cannot open the case image ({type(exc).__name__})")
    w, h = img.size
    px = (round(box[0] * w), round(box[1] * h), round(box[2] * w), round(box[3] * h))
    if px[2] - px[0] < 1 or px[3] - px[1] < 1:
        return ToolResult(text=f"error: box {box} is smaller than one pixel of a {w}x{h} image")
    crop = img.crop(px)
    out_w, out_h = max(1, round(crop.width * factor)), max(1, round(crop.height * factor))
    if out_w * out_h > MAX_OUTPUT_PIXELS:
        return ToolResult(text=f"error: zoomed image {out_w}x{out_h} is too large; use a smaller scale")
    from PIL import Image

    zoomed = crop.resize((out_w, out_h), Image.Resampling.LANCZOS)
    text = f"zoomed box ({box[0]:g}, {box[1]:g}, {box[2]:g}, {box[3]:g}) x{factor:g}: {out_w}x{out_h} image"
    meta = {"box": box, "scale": factor, "source_size": [w, h], "crop_px": list(px), "size": [out_w, out_h]}
    return ToolResult(text=text, images=[zoomed], meta=meta)


def make_image_zoom(case: Any = None) -> Tool:
    """Build `image_zoom` bound to `case.inputs.image` (None gives an error observation)."""
    image = getattr(getattr(case, "inputs", None), "image", None)

    def image_zoom(x0: Any = None, y0: Any = None, x1: Any = None, y1: Any = None, scale: Any = 2) -> ToolResult:
        if None in (x0, y0, x1, y1):
            return ToolResult(text="error: x0, y0, x1 and y1 are required")
        return zoom(image, x0, y0, x1, y1, scale)

    return Tool(
        name="image_zoom",
        description="Zoom into a box of the image (fractions 0-1).",
        parameters=SCHEMA,
        fn=image_zoom,
    )
