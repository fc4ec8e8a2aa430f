"""moto's S3 server (``python -m moto.server``) as the tests start it, with two of its costs
per request removed: it looks a request's backend up by listing its own package folder
(``moto.backends.list_of_moto_modules``, a directory scan under a global lock) and matching
hundreds of URL patterns, and it logs every request. A host's backend never changes while
the server runs, so the lookup is remembered per host; the request log is turned off. What
the server answers is unchanged."""

from __future__ import annotations

import functools
import logging
import sys

from moto import backends
from moto.moto_server.werkzeug_app import DomainDispatcherApplication


def main() -> None:
    listed = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: listed  # type: ignore[assignment,return-value]
    lookup = DomainDispatcherApplication.get_backend_for_host
    cached = functools.lru_cache(maxsize=256)(lambda self, host: lookup(self, host))
    DomainDispatcherApplication.get_backend_for_host = cached  # type: ignore[method-assign]
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    from moto.server import main as serve

    serve(sys.argv[1:])


if __name__ == "__main__":
    main()
