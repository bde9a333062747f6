# The compiled extension _draws (Cython, turboloader/_native/_draws.pyx).
from typing import Any

def resized_crop(keys: Any, counter: Any, sizes: Any, mask: Any, out: Any, scale_lo: float,
                 scale_span: float, ratio_lo: float, ratio_span: float, ratio_min: float,
                 ratio_max: float, /) -> None: ...
def words(keys: Any, counter: Any, mask: Any, out: Any, /) -> None: ...
