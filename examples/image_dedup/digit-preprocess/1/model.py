"""digit-preprocess: PNG bytes in, the 64 grey levels (0..1) that digit-embedder takes out.

The one place of the example that decodes images: the digit-embedding ensemble runs it as its first
step, and digit-dedup calls it by BLS, so both turn a PNG into exactly the same pixels, the values
examples/image_dedup/build.py trained the embedder on and indexed.

A request may hold several images (one PNG per row of ``image``). A row that is not a PNG fails its
own request with INVALID_ARG (HTTP 400, gRPC INVALID_ARGUMENT) and a message saying which row and what
to send; the other requests of the batch are answered.
"""

import io

import numpy as np
import triton_python_backend_utils as pb_utils
from PIL import Image

SIDE = 8
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class NotAPngError(ValueError):
    """A row of ``image`` that cannot be read as a PNG; the message is for the client."""


def png_pixels(data: bytes, row: int) -> np.ndarray:
    """One PNG's 64 grey levels in 0..1, row by row, after turning it grey and shrinking it to 8x8."""
    if not data.startswith(PNG_SIGNATURE):
        # Bytes in hex, not Python's repr: the message goes to a client, who may not read Python.
        raise NotAPngError(
            f"input 'image' row {row} is not a PNG image: it starts with bytes [{data[:8].hex(' ')}], "
            f"and a PNG starts with [{PNG_SIGNATURE.hex(' ')}]; send the bytes of a .png file (other "
            "image formats are not decoded)"
        )
    try:
        with Image.open(io.BytesIO(data), formats=["PNG"]) as image:
            grey = image.convert("L")  # decodes the whole file: a truncated one fails here
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise NotAPngError(
            f"input 'image' row {row} starts like a PNG but cannot be decoded ({exc}); send a complete, "
            "valid .png file"
        ) from None
    if grey.size != (SIDE, SIDE):
        # BOX averages each 8x8 cell's area, as load_digits' 8x8 images were made from 32x32 bitmaps.
        grey = grey.resize((SIDE, SIDE), Image.Resampling.BOX)
    return np.asarray(grey, dtype=np.uint8).reshape(SIDE * SIDE).astype(np.float32) / 255.0


class TritonPythonModel:
    """Decodes each request's PNGs; Pillow is the only dependency beyond numpy."""

    def execute(self, requests):
        return [self._answer(request) for request in requests]

    def _answer(self, request):
        images = pb_utils.get_input_tensor_by_name(request, "image").as_numpy()
        try:
            pixels = np.stack([png_pixels(bytes(row[0]), index) for index, row in enumerate(images)])
        except NotAPngError as exc:
            return pb_utils.InferenceResponse(
                error=pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)
            )
        return pb_utils.InferenceResponse([pb_utils.Tensor("pixels", pixels)])
