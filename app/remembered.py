"""Finished results remembered by what made them: a step of the Lesson or a Compare is a function of its
settings alone (every run in it is seeded), so a repeated request -- a class pressing the same button --
is answered at once from here, and its status says so. Bounded by the bytes of the images kept (the
tables and words are small beside them), least recently used first out."""
from __future__ import annotations

import threading
import time
from collections import OrderedDict

import numpy as np


def images_bytes(gallery) -> int:
    return sum(img.nbytes for img, _ in gallery if isinstance(img, np.ndarray))


class Remembered:
    def __init__(self, most_bytes: int, size_of):
        self.most_bytes, self.size_of = most_bytes, size_of   # size_of(result) -> bytes it holds
        self._kept: OrderedDict = OrderedDict()               # key -> (monotonic time it finished, result)
        self._lock = threading.Lock()

    def recall(self, key):
        """(seconds since it finished, result) or None."""
        with self._lock:
            hit = self._kept.get(key)
            if hit is None:
                return None
            self._kept.move_to_end(key)
            return time.monotonic() - hit[0], hit[1]

    def keep(self, key, result) -> None:
        with self._lock:
            self._kept[key] = (time.monotonic(), result)
            self._kept.move_to_end(key)
            while len(self._kept) > 1 and sum(self.size_of(r) for _, r in self._kept.values()) > self.most_bytes:
                self._kept.popitem(last=False)

    def keys(self) -> list:
        with self._lock:
            return list(self._kept)

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()
