"""`hetero` (the console script) and ``python -m pipeline``: `pipeline.cli` with the stop of a run (`pipeline.stop`) in
place before the CLI's modules load, which takes a second or more: a signal at any instant of `hetero run` ends it in
one line.

    hetero run --framework tensorflow
    python -m pipeline run --framework tensorflow       # the same
"""

from __future__ import annotations

import sys

from pipeline.stop import STOP


def main() -> int:
    STOP.install()
    try:
        with STOP.claiming_errors():  # a library's error around a stop's raise while the modules load is the stop
            from pipeline.cli import main as cli

            return cli()
    except KeyboardInterrupt as exc:  # a stop while the CLI loaded: nothing had started
        print(STOP.line(exc), file=sys.stderr)
        return STOP.exit_code(exc)


if __name__ == "__main__":
    sys.exit(main())
