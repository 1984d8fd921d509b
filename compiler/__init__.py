"""The chat-template compiler: Jinja chat template -> verified, readable Python renderer."""

__version__ = "0.1.0"
