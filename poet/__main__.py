import sys

try:
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C while the package loads: no traceback
    print("\npoet: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
