import sys

if sys.argv[1:2] == ["diff"]:  # a missing file or unknown model fails before the compiler is imported
    from .diff_arguments import early_error

    problem = early_error(sys.argv[2:])
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)

from .cli import main  # noqa: E402

sys.exit(main())
