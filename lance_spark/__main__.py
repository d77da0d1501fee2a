"""``python -m lance_spark doctor [--remote sc://host:port]``: see :mod:`lance_spark.doctor`."""

from __future__ import annotations

import sys

from lance_spark import doctor

COMMANDS = {"doctor": doctor.main}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m lance_spark {{{','.join(COMMANDS)}}} [options]", file=sys.stderr)
        return 2
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
