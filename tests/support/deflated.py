"""A zip member that inflates to gigabytes, written in a second: what a hostile .npz is made of."""

from __future__ import annotations

import zlib


class DeflatedOnce:
    """zlib's raw deflate with a full flush after each write, so each write is deflated on its own: the same
    bytes written again deflate to the same bytes again, kept instead of deflated again. It inflates to exactly
    what was written (the bomb's 2 GiB of zeros took zipfile 4 s of deflating)."""

    def __init__(self) -> None:
        self.inner = zlib.compressobj(1, zlib.DEFLATED, -15)
        self.previous: tuple[bytes, bytes] | None = None
        self.repeated: tuple[bytes, bytes] | None = None

    def compress(self, data: bytes) -> bytes:
        if self.repeated is not None and data is self.repeated[0]:
            return self.repeated[1]
        deflated = self.inner.compress(data) + self.inner.flush(zlib.Z_FULL_FLUSH)
        if self.previous is not None and data is self.previous[0]:
            assert deflated == self.previous[1]  # what makes keeping it right
            self.repeated = (data, deflated)
        self.previous = (data, deflated)
        return deflated

    def flush(self) -> bytes:
        return self.inner.flush()
