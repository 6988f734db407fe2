"""``python -m sandbox`` is the ``retool-sandbox`` console script."""

from sandbox.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
