"""Tools on top of the library: the ``turboloader`` command line (:mod:`~turboloader.tools.cli`),
dataset conversion and checks (:mod:`~turboloader.tools.convert`, reading through
:mod:`~turboloader.tools.sources`, writing through :mod:`~turboloader.tools.sinks`, with the
:mod:`~turboloader.tools.manifests` check), the demo
(:mod:`~turboloader.tools.demo`) and synthetic test images
(:mod:`~turboloader.tools.synthetic`). Nothing in the library imports them.
"""

__all__ = []
