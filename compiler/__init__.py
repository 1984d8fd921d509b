"""The chat-template compiler: Jinja chat template -> verified, readable Python renderer."""

__version__ = "0.1.0"


def main() -> int:
    """The ``rllm-compile`` console script (``python -m compiler`` in a checkout)."""
    try:
        from .cli import main as cli_main
    except ImportError as exc:  # the runtime install lacks the build-time dependencies
        print(
            f"error: the compiler needs the 'compiler' extra ({exc}); pip install 'rllm-renderers[compiler]'",
            file=__import__("sys").stderr,
        )
        return 1
    return cli_main()
