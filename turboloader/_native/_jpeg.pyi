# The compiled extension _jpeg (Cython, turboloader/_native/_jpeg.pyx): its names are untyped here
# (Any) until the module gets a stub of its own; the .pyx says what each takes.
from typing import Any

def __getattr__(name: str) -> Any: ...
